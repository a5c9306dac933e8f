package providers

import "time"

// Facts is what a box is and has, measured in the box where the provider can.
// A fact the provider did not establish is left absent (zero, or nil for the
// pointer fields), and an absent fact never grants anything: read the facts
// that grant an ability through the methods below, which fail closed.
type Facts struct {
	Provider  string    `json:"provider"`
	ID        string    `json:"id"`
	Isolation Isolation `json:"isolation,omitempty"`
	OS        string    `json:"os,omitempty"`   // GOOS spelling: "linux"
	Arch      string    `json:"arch,omitempty"` // GOARCH spelling: "amd64", "arm64"
	Workspace string    `json:"workspace,omitempty"`
	TmpDir    string    `json:"tmpDir,omitempty"` // a writable directory for boxfs's own files
	Shell     string    `json:"shell,omitempty"`  // the shell a command line runs in: "/bin/bash", "/bin/sh"; "" if none known

	CPUs     float64 `json:"cpus,omitempty"`
	MemoryMB int     `json:"memoryMb,omitempty"`
	GPU      string  `json:"gpu,omitempty"`
	DiskGB   float64 `json:"diskGb,omitempty"`

	Network NetworkMode `json:"network,omitempty"` // as measured or read back; "" unknown
	Ports   []int       `json:"ports"`

	FUSE          *bool `json:"fuse,omitempty"`          // /dev/fuse usable in the box
	PtraceScope   *int  `json:"ptraceScope,omitempty"`   // kernel.yama.ptrace_scope; nil unknown
	LiveProcesses *bool `json:"liveProcesses,omitempty"` // processes keep running between commands
	Stdin         *bool `json:"stdin,omitempty"`         // Exec streams stdin while the process runs

	StartedAt time.Time `json:"startedAt,omitzero"`
	MaxExecMs int       `json:"maxExecMs,omitempty"` // the provider's own cap on one command; 0 none known
	// SecretsVia is how secrets can reach a program in the box: "fd" when
	// Exec streams a real stdin (a pipe the program reads, nothing staged
	// in a file), which a launch hands on as an inherited descriptor; ""
	// when the box can take none.
	SecretsVia string `json:"secretsVia,omitempty"`
	// LifetimeVia names what ends the box at its lifetime without a call
	// from the host ("activeDeadlineSeconds"); "" where the provider does
	// not say.
	LifetimeVia string `json:"lifetimeVia,omitempty"`
	// FilesSharedWith names who else reads and writes the box's files:
	// SharedDisk when every box on the same disk can; "" when none but
	// the box (or not known).
	FilesSharedWith string `json:"filesSharedWith,omitempty"`

	// Suspend is what the box keeps while suspended (SuspendMemory,
	// SuspendFilesystem, SuspendSnapshot); "" when it cannot be suspended.
	Suspend string `json:"suspend,omitempty"`
}

// SharedDisk is Facts.FilesSharedWith for a box whose files are on a disk
// every box on it can read and write.
const SharedDisk = "disk"

// Bool returns a fact pointer for a literal: Facts{FUSE: Bool(true)}.
func Bool(v bool) *bool { return &v }

// Int returns a fact pointer for a literal.
func Int(v int) *int { return &v }

// HasLiveProcesses reports whether processes are known to keep running
// between commands (what a long-lived agent needs). Absent: false.
func (f Facts) HasLiveProcesses() bool { return f.LiveProcesses != nil && *f.LiveProcesses }

// HasStdin reports whether Exec is known to stream stdin to a running
// process. Absent: false.
func (f Facts) HasStdin() bool { return f.Stdin != nil && *f.Stdin }

// HasFUSE reports whether FUSE is known to work inside the box. Absent: false.
func (f Facts) HasFUSE() bool { return f.FUSE != nil && *f.FUSE }

// NetworkIsolated reports whether the box is known to reach nothing but
// itself. Absent or anything else: false.
func (f Facts) NetworkIsolated() bool { return f.Network == NetworkNone }

// PtraceRestricted reports whether ptrace is known to be restricted
// (ptrace_scope >= 1). Absent: false.
func (f Facts) PtraceRestricted() bool { return f.PtraceScope != nil && *f.PtraceScope >= 1 }

// Runs reports whether a binary built for goos/goarch is known to run in the
// box. Absent OS or Arch: false.
func (f Facts) Runs(goos, goarch string) bool {
	return f.OS != "" && f.Arch != "" && f.OS == goos && f.Arch == goarch
}

// TakesSecrets reports whether secrets can reach a program in the box on
// a real stdin (SecretsVia "fd"). Absent: false.
func (f Facts) TakesSecrets() bool { return f.SecretsVia == "fd" }

// HasShell reports whether a shell is known to be in the box.
func (f Facts) HasShell() bool { return f.Shell != "" }

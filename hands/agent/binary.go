package agent

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
)

// SelfBinary returns the path of the running program when it can serve as
// the agent in a box: a static Linux ELF for this architecture (no
// interpreter, so it runs in any Linux box whatever its libc). Otherwise
// it returns an error saying why; the CLI then runs without the agent
// channel, or with a binary named by the user.
func SelfBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("agent: finding the running binary: %w", err)
	}
	if runtime.GOOS != "linux" {
		return "", fmt.Errorf("agent: the running binary is for %s, not linux", runtime.GOOS)
	}
	arch, err := staticELFArch(exe)
	if err != nil {
		return "", err
	}
	if arch != runtime.GOARCH {
		return "", fmt.Errorf("agent: %s is a %s binary, not %s", exe, arch, runtime.GOARCH)
	}
	return exe, nil
}

// staticELFArch returns the GOARCH of a static Linux ELF executable, or an
// error if path is not one.
func staticELFArch(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("agent: %s is not an ELF binary: %w", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("agent: %s is not an executable", path)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", fmt.Errorf("agent: %s is dynamically linked (build it with CGO_ENABLED=0)", path)
		}
	}
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		return "", fmt.Errorf("agent: %s is not a Linux binary (OS ABI %v)", path, f.OSABI)
	}
	arch, ok := map[elf.Machine]string{
		elf.EM_X86_64:  "amd64",
		elf.EM_AARCH64: "arm64",
		elf.EM_386:     "386",
		elf.EM_ARM:     "arm",
		elf.EM_RISCV:   "riscv64",
		elf.EM_PPC64:   "ppc64le",
		elf.EM_S390:    "s390x",
	}[f.Machine]
	if !ok {
		return "", fmt.Errorf("agent: %s is for machine %v", path, f.Machine)
	}
	return arch, nil
}

// binaryInfo is what the channel needs to know of the agent binary.
type binaryInfo struct {
	path   string
	arch   string // GOARCH
	size   int64
	sha256 string // hex
}

func readBinaryInfo(path string) (binaryInfo, error) {
	st, err := os.Stat(path)
	if err != nil {
		return binaryInfo{}, fmt.Errorf("agent: %w", err)
	}
	key := binaryKey{path: path, size: st.Size(), mtime: st.ModTime().UnixNano()}
	key.dev, key.ino, key.ctime = fileIdentity(st)
	binaries.Lock()
	known, ok := binaries.m[key]
	binaries.Unlock()
	if ok {
		return known, nil
	}
	info, err := hashBinary(path)
	if err != nil {
		return binaryInfo{}, err
	}
	if info.size == key.size {
		binaries.Lock()
		binaries.m[key] = info
		binaries.Unlock()
	}
	return info, nil
}

// binaries keeps what readBinaryInfo learnt of each binary, by its path,
// identity and times: every box's channel names the same ~50 MB binary,
// hashed once per process (and in the background at start, see
// PrepareBinary).
var binaries = struct {
	sync.Mutex
	m map[binaryKey]binaryInfo
}{m: map[binaryKey]binaryInfo{}}

type binaryKey struct {
	path               string
	dev, ino           uint64
	size, mtime, ctime int64
}

// PrepareBinary reads and hashes the agent binary at path ahead of the
// first channel, so a box's first open does not wait for it. Errors are
// left for the channel to report.
func PrepareBinary(path string) {
	readBinaryInfo(path)
}

func hashBinary(path string) (binaryInfo, error) {
	arch, err := staticELFArch(path)
	if err != nil {
		return binaryInfo{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return binaryInfo{}, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return binaryInfo{}, err
	}
	return binaryInfo{path: path, arch: arch, size: n, sha256: hex.EncodeToString(h.Sum(nil))}, nil
}

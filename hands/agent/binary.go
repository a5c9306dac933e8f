package agent

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	pathpkg "path"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// SelfBinary returns the path of the running program when it can serve as
// the agent in a box: a Linux ELF for this architecture. A static one
// (CGO_ENABLED=0) runs in any Linux box whatever its libc; a dynamic one
// (the usual build where a C compiler is installed: net and os/user use
// cgo) runs where the box's C library does, which CheckLoader tells
// before anything is uploaded. Otherwise it returns an error saying why;
// the CLI then runs without the agent channel, or with a binary named by
// the user.
func SelfBinary() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("agent: finding the running binary: %w", err)
	}
	if runtime.GOOS != "linux" {
		return "", fmt.Errorf("agent: the running binary is for %s, not linux", runtime.GOOS)
	}
	e, err := readELF(exe)
	if err != nil {
		return "", err
	}
	if e.arch != runtime.GOARCH {
		return "", fmt.Errorf("agent: %s is a %s binary, not %s", exe, e.arch, runtime.GOARCH)
	}
	return exe, nil
}

// elfFacts is what the channel needs of a Linux ELF executable.
type elfFacts struct {
	arch string // GOARCH
	// interp is the program interpreter of a dynamic executable (its
	// PT_INTERP, e.g. /lib64/ld-linux-x86-64.so.2), "" for a static one.
	interp string
	// glibc is the newest GLIBC_ symbol version a dynamic executable
	// needs ("2.34"), "" when it needs none.
	glibc string
}

// readELF reads path's architecture and, when it is dynamically linked,
// its interpreter and the C library version it needs; it is an error if
// path is not a Linux ELF executable.
func readELF(path string) (elfFacts, error) {
	f, err := elf.Open(path)
	if err != nil {
		return elfFacts{}, fmt.Errorf("agent: %s is not an ELF binary: %w", path, err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return elfFacts{}, fmt.Errorf("agent: %s is not an executable", path)
	}
	if f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		return elfFacts{}, fmt.Errorf("agent: %s is not a Linux binary (OS ABI %v)", path, f.OSABI)
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
		return elfFacts{}, fmt.Errorf("agent: %s is for machine %v", path, f.Machine)
	}
	e := elfFacts{arch: arch}
	for _, p := range f.Progs {
		if p.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(p.Open(), 4096))
		if err != nil {
			return elfFacts{}, fmt.Errorf("agent: reading the interpreter of %s: %w", path, err)
		}
		e.interp = strings.TrimRight(string(b), "\x00")
		if !pathpkg.IsAbs(e.interp) {
			return elfFacts{}, fmt.Errorf("agent: %s names the interpreter %q", path, e.interp)
		}
	}
	if e.interp == "" {
		return e, nil
	}
	syms, err := f.ImportedSymbols()
	if err != nil {
		return elfFacts{}, fmt.Errorf("agent: reading the symbols %s needs: %w", path, err)
	}
	for _, s := range syms {
		if v, ok := strings.CutPrefix(s.Version, "GLIBC_"); ok && versionLess(e.glibc, v) {
			e.glibc = v
		}
	}
	return e, nil
}

// versionLess reports whether dotted version a is older than b ("" is
// older than any).
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	if a == "" {
		as = nil
	}
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// binaryInfo is what the channel needs to know of the agent binary.
type binaryInfo struct {
	path string
	elfFacts
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
	e, err := readELF(path)
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
	return binaryInfo{path: path, elfFacts: e, size: n, sha256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Linking says how the agent binary at path is linked: interp is its
// program interpreter ("" for a static binary, which runs in any Linux
// box) and glibc the GNU C library version it needs of a box (see
// CheckLoader).
func Linking(path string) (interp, glibc string, err error) {
	e, err := readELF(path)
	return e.interp, e.glibc, err
}

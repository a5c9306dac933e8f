package agent

import (
	"os"
	"testing"

	"github.com/boxfs/boxfs/internal/boxfsbin"
)

func TestSelfBinary(t *testing.T) {
	e, err := readELF(boxfsbin.Path(t))
	if err != nil || e.interp != "" || e.glibc != "" {
		t.Fatalf("the static boxfs build: %+v, %v", e, err)
	}
	if e, err := readELF("/bin/sh"); err != nil || e.interp == "" || e.glibc == "" {
		t.Errorf("/bin/sh (dynamic): %+v, %v; want its interpreter and glibc version", e, err)
	}
	if _, err := readELF("/etc/passwd"); err == nil {
		t.Error("a text file accepted as an agent binary")
	}
	exe, _ := os.Executable()
	_, errELF := readELF(exe)
	p, err := SelfBinary()
	if (err == nil) != (errELF == nil) || (err == nil && p != exe) {
		t.Errorf("SelfBinary() = %q, %v; readELF(test binary) = %v", p, err, errELF)
	}
}

func TestVersionLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		less bool
	}{
		{"", "2.2.5", true},
		{"2.2.5", "", false},
		{"2.2.5", "2.34", true},
		{"2.34", "2.4", false},
		{"2.34", "2.34", false},
		{"2.3", "2.3.2", true},
		{"2.31", "2.34", true},
	} {
		if got := versionLess(c.a, c.b); got != c.less {
			t.Errorf("versionLess(%q, %q) = %v, want %v", c.a, c.b, got, c.less)
		}
	}
}

func TestGlibcVersion(t *testing.T) {
	for out, want := range map[string]string{
		"ld.so (Debian GLIBC 2.36-9+deb12u14) stable release version 2.36.\nCopyright (C) 2022": "2.36",
		"ld.so (GNU libc) stable release version 2.38.\n":                                       "2.38",
		"ld.so (Ubuntu GLIBC 2.31-0ubuntu9.9) stable release version 2.31.":                     "2.31",
		"ld.so (GNU libc) development release version 2.40.9000.":                               "2.40",
		"musl libc (x86_64)\nVersion 1.2.4\nDynamic Program Loader":                             "",
		"": "",
	} {
		if got := glibcVersion(out); got != want {
			t.Errorf("glibcVersion(%q) = %q, want %q", out, got, want)
		}
	}
}

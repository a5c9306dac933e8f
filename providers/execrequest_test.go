package providers_test

import (
	"testing"
	"unicode/utf8"

	"github.com/boxfs/boxfs/providers"
)

func TestExecRequestValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		req  providers.ExecRequest
		ok   bool
	}{
		{"plain", providers.ExecRequest{Argv: []string{"true"}}, true},
		{"non-UTF-8 and empty arguments", providers.ExecRequest{Argv: []string{"printf", "", "\xff\xfe", "ünï ✓"}}, true},
		{"env and dir", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"_A1": "x y", "b": ""}, Dir: "/tmp/ü"}, true},
		{"relative dir", providers.ExecRequest{Argv: []string{"pwd"}, Dir: "sub/dir"}, true},
		{"nil argv", providers.ExecRequest{}, false},
		{"empty argv", providers.ExecRequest{Argv: []string{}}, false},
		{"empty program", providers.ExecRequest{Argv: []string{"", "x"}}, false},
		{"NUL in the program", providers.ExecRequest{Argv: []string{"a\x00b"}}, false},
		{"NUL in an argument", providers.ExecRequest{Argv: []string{"printf", "a\x00b"}}, false},
		{"NUL in dir", providers.ExecRequest{Argv: []string{"pwd"}, Dir: "/tmp\x00"}, false},
		{"dir not UTF-8", providers.ExecRequest{Argv: []string{"pwd"}, Dir: "/tmp/\xff"}, false},
		{"env name empty", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"": "x"}}, false},
		{"env name starts with a digit", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"1BAD": "x"}}, false},
		{"env name with a dash", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"A-B": "x"}}, false},
		{"env name with =", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"A=B": "x"}}, false},
		{"NUL in an env value", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"OK": "a\x00b"}}, false},
		{"env value not UTF-8", providers.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"OK": "a\xff\xfe"}}, true},
	} {
		err := c.req.Validate()
		switch {
		case c.ok && err != nil:
			t.Errorf("%s: Validate = %v, want nil", c.name, err)
		case !c.ok && providers.CodeOf(err) != providers.Invalid:
			t.Errorf("%s: Validate = %v, want Invalid", c.name, err)
		}
		// ValidateUTF8 refuses what Validate does, and env values not in UTF-8.
		utf8Env := true
		for _, v := range c.req.Env {
			utf8Env = utf8Env && utf8.ValidString(v)
		}
		err = c.req.ValidateUTF8()
		switch {
		case c.ok && utf8Env && err != nil:
			t.Errorf("%s: ValidateUTF8 = %v, want nil", c.name, err)
		case (!c.ok || !utf8Env) && providers.CodeOf(err) != providers.Invalid:
			t.Errorf("%s: ValidateUTF8 = %v, want Invalid", c.name, err)
		}
	}
}

func TestExecRequestWorkDir(t *testing.T) {
	for _, c := range []struct{ dir, ws, want string }{
		{"", "/work", "/work"},
		{"", "", ""},
		{"/tmp", "/work", "/tmp"},
		{"/tmp/", "/work", "/tmp/"},
		{"sub", "/work", "/work/sub"},
		{"./a/../b", "/work", "/work/b"},
		{".", "/work", "/work"},
		{"sub", "", "sub"},
	} {
		if got := (providers.ExecRequest{Dir: c.dir}).WorkDir(c.ws); got != c.want {
			t.Errorf("Dir %q in workspace %q: WorkDir = %q, want %q", c.dir, c.ws, got, c.want)
		}
	}
}

package providers

import (
	"path"
	"strings"
	"unicode/utf8"
)

// Validate checks what every box requires of a command, before anything
// reaches the box: a program name; no NUL byte in an argument, the
// directory or an env value (no exec API can carry one); env names that
// are variable names; a directory in UTF-8. Arguments and env values may
// hold any other bytes. Errors are Invalid.
func (r ExecRequest) Validate() error {
	const op = "providers.ExecRequest.Validate"
	if len(r.Argv) == 0 || r.Argv[0] == "" {
		return Errorf(Invalid, op, "empty argv")
	}
	for i, a := range r.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return Errorf(Invalid, op, "argument %d holds a NUL byte", i)
		}
	}
	if strings.IndexByte(r.Dir, 0) >= 0 || !utf8.ValidString(r.Dir) {
		return Errorf(Invalid, op, "dir %q holds NUL or is not UTF-8", r.Dir)
	}
	for k, v := range r.Env {
		if !ValidEnvName(k) {
			return Errorf(Invalid, op, "env name %q is not a variable name ([A-Za-z_][A-Za-z0-9_]*)", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return Errorf(Invalid, op, "env %s: the value holds a NUL byte", k)
		}
	}
	return nil
}

// ValidateUTF8 is Validate for a box whose exec API carries env values as
// UTF-8 strings (JSON, protobuf) with no escape for other bytes: an env
// value must be UTF-8 too. Errors are Invalid.
func (r ExecRequest) ValidateUTF8() error {
	const op = "providers.ExecRequest.ValidateUTF8"
	if err := r.Validate(); err != nil {
		return err
	}
	for k, v := range r.Env {
		if !utf8.ValidString(v) {
			return Errorf(Invalid, op, "env %s: the value is not UTF-8, which this box's exec API cannot carry", k)
		}
	}
	return nil
}

// WorkDir is the directory the command runs in, in a box whose workspace
// is workspace: the workspace when Dir is "", Dir within the workspace
// when it is relative, else Dir as it is.
func (r ExecRequest) WorkDir(workspace string) string {
	switch {
	case r.Dir == "":
		return workspace
	case path.IsAbs(r.Dir):
		return r.Dir
	}
	return path.Join(workspace, r.Dir)
}

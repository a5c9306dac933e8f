package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// reorderArgs lets flags follow a command's arguments, as users type them
// (`boxfs mount /boxes --background`) and as mount(8) passes them
// (`boxfs mount /boxes -o allow_other`): urfave/cli stops at the first
// argument. It moves every flag after the command name to before its
// arguments, and global flags to before the command name. Everything from
// a `--` on stays as it is, and so does everything after exec's box name
// (that is the command to run). A flag it does not know stays among the
// command's flags, for the parser to refuse.
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	const complete = "--generate-bash-completion"
	completing := args[len(args)-1] == complete
	if completing {
		args = args[:len(args)-1]
	}
	out := append([]string(nil), args[0])
	i := 1
	// Global flags before the command.
	for i < len(args) && isFlag(args[i]) {
		out = append(out, args[i])
		if takesValue(app.Flags, args[i]) && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
		i++
	}
	if i >= len(args) {
		return finish(out, completing, complete)
	}
	cmd := findCommand(app, args[i])
	if cmd == nil || cmd.SkipFlagParsing {
		return finish(append(out, args[i:]...), completing, complete)
	}
	name := args[i]
	var globals, flags, pos, tail []string
	rest := args[i+1:]
	for j := 0; j < len(rest); j++ {
		a := rest[j]
		if a == "--" || (cmd.Name == "exec" && len(pos) >= 1) {
			tail = rest[j:]
			if cmd.Name == "exec" && len(pos) == 0 {
				// exec -- CMD: no box name, the box is the cwd's. The
				// parser drops one "--"; the second tells exec so.
				tail = append([]string{"--"}, tail...)
			}
			break
		}
		if !isFlag(a) {
			pos = append(pos, a)
			continue
		}
		// -oopts, as mount(8) helpers may pass it: -o opts.
		if strings.HasPrefix(a, "-o") && !strings.HasPrefix(a, "--") && len(a) > 2 && a[2] != '=' {
			flags = append(flags, "-o", a[2:])
			continue
		}
		dst := &flags
		fl := cmd.Flags
		if lookupFlag(cmd.Flags, a) == nil && lookupFlag(app.Flags, a) != nil {
			dst, fl = &globals, app.Flags
		}
		*dst = append(*dst, a)
		if takesValue(fl, a) && j+1 < len(rest) {
			j++
			*dst = append(*dst, rest[j])
		}
	}
	out = append(out, globals...)
	out = append(out, name)
	out = append(out, flags...)
	out = append(out, pos...)
	out = append(out, tail...)
	return finish(out, completing, complete)
}

func finish(out []string, completing bool, flag string) []string {
	if completing {
		out = append(out, flag)
	}
	return out
}

func isFlag(a string) bool {
	return strings.HasPrefix(a, "-") && a != "-" && a != "--"
}

func findCommand(app *cli.App, name string) *cli.Command {
	for _, c := range app.Commands {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// flagName is a's flag name: "--state=x" → "state".
func flagName(a string) (name string, hasValue bool) {
	a = strings.TrimLeft(a, "-")
	name, _, hasValue = strings.Cut(a, "=")
	return name, hasValue
}

func lookupFlag(flags []cli.Flag, a string) cli.Flag {
	name, _ := flagName(a)
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// takesValue reports whether flag a is one of flags that takes its value
// from the next argument.
func takesValue(flags []cli.Flag, a string) bool {
	if _, has := flagName(a); has {
		return false
	}
	f := lookupFlag(flags, a)
	if f == nil {
		return false
	}
	_, isBool := f.(*cli.BoolFlag)
	return !isBool
}

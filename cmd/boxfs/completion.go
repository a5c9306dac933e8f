package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

func completionCommand() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: bash, zsh or fish",
		ArgsUsage: "bash|zsh|fish",
		Description: `bash:  source <(boxfs completion bash)      (or save it in /etc/bash_completion.d/boxfs)
zsh:   source <(boxfs completion zsh)
fish:  boxfs completion fish > ~/.config/fish/completions/boxfs.fish
Box names complete from the state directory and the configuration.`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("completion: name a shell: bash, zsh or fish")
			}
			switch sh := c.Args().First(); sh {
			case "bash":
				_, err := fmt.Fprint(c.App.Writer, bashCompletion)
				return err
			case "zsh":
				_, err := fmt.Fprint(c.App.Writer, zshCompletion)
				return err
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				_, err = fmt.Fprint(c.App.Writer, s)
				return err
			default:
				return usagef("completion: unknown shell %q (bash, zsh or fish)", sh)
			}
		},
	}
}

// completeBoxNames completes a command's box name argument.
func completeBoxNames(c *cli.Context) {
	if c.NArg() > 0 {
		return
	}
	e, err := newEnv(c, false)
	if err != nil {
		return
	}
	for _, n := range boxNames(e) {
		fmt.Fprintln(c.App.Writer, n)
	}
}

// completeNothing completes nothing (a new name).
func completeNothing(*cli.Context) {}

// The scripts call boxfs with --generate-bash-completion after the words
// typed so far (urfave/cli's protocol).
const bashCompletion = `# bash completion for boxfs
_boxfs_complete() {
	local cur words
	COMPREPLY=()
	cur="${COMP_WORDS[COMP_CWORD]}"
	if [[ "$cur" == -* ]]; then
		words=$("${COMP_WORDS[@]:0:$COMP_CWORD}" "$cur" --generate-bash-completion 2>/dev/null)
	else
		words=$("${COMP_WORDS[@]:0:$COMP_CWORD}" --generate-bash-completion 2>/dev/null)
	fi
	COMPREPLY=($(compgen -W "$words" -- "$cur"))
	return 0
}
complete -o bashdefault -o default -F _boxfs_complete boxfs
`

const zshCompletion = `#compdef boxfs
_boxfs() {
	local -a opts
	local cur
	cur=${words[-1]}
	if [[ "$cur" == "-"* ]]; then
		opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion 2>/dev/null)}")
	else
		opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion 2>/dev/null)}")
	fi
	if [[ "${opts[1]}" != "" ]]; then
		_describe 'values' opts
	else
		_files
	fi
}
compdef _boxfs boxfs
`

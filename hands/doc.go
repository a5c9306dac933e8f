// Package hands performs file operations and runs commands in a box by the
// fastest path the box allows: the box's own file API, the boxfs agent
// channel, the provider's native file API, or fixed POSIX scripts over Exec.
//
// # Choosing a path
//
// New looks at the box once and picks, fastest first:
//
//   - "native-files": the box implements providers.Files itself (the local
//     provider's host directory, the fake's memory); hands uses it directly.
//   - "agent": the box runs Linux on this host's architecture, keeps
//     processes alive and streams stdin, and Options.AgentBinary names a
//     boxfs binary the box can run (static, or dynamic with the box's
//     glibc new enough: agent.CheckLoader): hands starts one long-lived
//     "boxfs agent" exec in the box and speaks SFTP over it (package
//     hands/agent). When the channel cannot start, New logs why, keeps it
//     for AgentOff and falls back.
//   - "native": the provider stats paths without a command
//     (providers.PathStater) and moves bulk data through its archive API
//     (providers.Archiver); every other operation runs a script.
//   - "native-ops": the box has some of providers.Files's methods itself
//     (Daytona's toolbox files); each one it has is used, and the others,
//     or any call it answers Unsupported, run a script.
//   - "script": every operation is one exec of a fixed POSIX sh script.
//
// # Scripts
//
// A script is fixed text; paths and other values reach it only as
// positional arguments (sh -c SCRIPT sh ARG...), never inside the text.
// Arguments holding bytes outside printable ASCII (newlines, non-UTF-8) or a
// backslash travel as \0ooo escapes that the script decodes with printf %b,
// so a provider that passes argv through JSON cannot mangle them. Box-side
// errnos are recovered by checks in the script that exit with 64+errno
// (test -e before rmdir gives ENOENT, a non-empty directory ENOTEMPTY), never
// by reading a tool's messages. GNU coreutils and findutils give nanosecond
// times; with busybox, stat degrades to whole seconds.
//
// # Commands
//
// Run starts a command line (in the box's shell: bash if it has one, else
// sh) or an argv, in the workspace, as its own process group; the provider's
// Exec kills and confirms the group on cancellation. When the box has a
// shell, each command is written down in the box under
// <TmpDir>/.boxfs/cmds/ together with the host process that started it, so
// EndLeftCommands in a later host process can end the groups a dead host
// left behind. A command's deadline is the caller's ctx; a separate liveness
// bound asks the provider for the box's status when a command has been
// silent that long, and ends the command with Liveness when the provider
// does not answer.
package hands

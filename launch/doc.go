// Package launch keeps a program alive in a box: a supervisor in the box
// restarts it by policy, stops it with grace, bounds its output and keeps
// its state in a file the host reads.
//
// # Host side
//
// A Launcher runs each of its operations (Start, Stop, Restart, State,
// List, ReadLog, Remove) as one command in the box and reads what it
// prints; it keeps nothing itself, so any host process (another mount, a
// CLI run, a host started after this one was killed) sees the same
// launches. The box's files are the truth: a state is never guessed from
// whether a process lives.
//
// # Box side
//
// Two supervisors keep a launch's files (TMPDIR/boxfs-launch-UID/NAME/;
// supervisor.sh lists them) the same way, so either takes over from the
// other: boxfs's static binary (BoxMain, run as "boxfs agent -launch")
// where the box runs it, and a POSIX sh script (Debian's dash, BusyBox
// ash) otherwise. The supervisor runs in a session of its own and starts
// each incarnation through a runner that writes its exit code, so it
// outlives the command that started it, the host and the mount, and a
// supervisor brought back by its watchdog takes the running incarnation
// over. Changes of a launch's state are made under a lock in the box, and
// every pid saved goes with its start time.
//
// # Secrets
//
// Secrets and stdin (Input) travel once, on the stdin of the command that
// starts the supervisor, and live only in its memory; each incarnation
// gets them through pipes. A supervisor brought back after a death cannot
// have them: its launch reads Lost.
package launch

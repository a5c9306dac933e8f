// Package providertest is the conformance suite every boxfs provider passes.
//
// A provider's package calls it from one test in its external test package:
//
//	func TestConformance(t *testing.T) {
//		providertest.Run(t, providertest.Harness{
//			Provider:    local.New(t.TempDir()),
//			Unsupported: []string{"image", "snapshot", "region", ...},
//		})
//	}
//
// Run runs one named subtest per behaviour (go test -run
// 'TestConformance/ExecCancel' runs one), each on a fresh box that the
// subtest destroys in t.Cleanup. Subtests run one after another. Every box
// the suite makes carries the labels boxfs-conformance=RUN and
// boxfs-conformance-test=SUBTEST, so leftovers can be found. The suite calls
// t.Setenv, so Run must not be called from a parallel test.
//
// # What a provider must support to pass
//
//   - Create, Attach, List and Destroy with the Box and Provider contracts of
//     package providers. Spec fields "labels" and "lifetime" must be
//     supported; every field the harness lists in Unsupported must be
//     refused with Unsupported, as must every spec in Harness.Refused, and
//     such a refused Create leaves no box behind (List does not see one).
//   - A label key "boxfs" or "boxfs.*" given to Create is Invalid.
//   - List(labels) returns exactly the boxes carrying those labels; Attach(id)
//     returns the same box (same ID and labels) and it runs commands.
//   - Facts: Provider equals Provider.Name(), ID equals Box.ID(), Workspace is
//     an absolute path (commands run there by default), StartedAt is set,
//     Stdin is true unless Harness.NoStdin or Harness.StagedStdin (then it
//     must not be true).
//     TmpDir, if set, is an existing directory.
//   - Status of a new box is running, with StartedAt set.
//   - Exec: argv passed byte for byte (spaces, quotes, newlines, backslashes,
//     shell metacharacters, empty strings, non-UTF-8 bytes); an empty argv,
//     an argument holding NUL or an env name that is not a variable name is
//     Invalid. Exit codes 0..255 come back as they are, and a command ended
//     by signal n reports 128+n. Stdin is delivered whole and then closed (a
//     nil Stdin reads EOF at once). Stdout and stderr are copied from their
//     own goroutines: 64 MiB on both at once must not deadlock. A command's
//     environment has the spec's Env and the request's Env (the request's
//     wins), a non-empty PATH, and never a variable of the host's process.
//     Dir is honoured; "" is Facts.Workspace; a Dir that does not exist
//     fails the command rather than running it elsewhere. Commands run
//     concurrently.
//   - Cancelling an Exec's ctx kills its whole process group, including
//     children it put in the background; Wait returns Aborted, and only
//     once no process of the group is alive. A passed ctx deadline does the
//     same and Wait returns Timeout. Process.Kill does the same and returns
//     only once the group is gone; killing an ended command is not an error.
//   - After Destroy: Exec, Status and Facts return Gone (as do the Files
//     methods if the box has them), Destroy again returns nil, Attach of the
//     id returns NotFound, and a command that was running ends (Wait
//     returns).
//   - Lifetime: a box made with Spec.Lifetime = Harness.Lifetime ends by the
//     provider's own doing. The suite starts a long command, then makes no
//     call at all until that command's Wait returns, which must happen no
//     earlier than the lifetime and no later than Lifetime+LifetimeSlack.
//     Afterwards Status is ended (or Gone) and Exec returns Gone.
//   - If the box implements providers.Files (and providers.Walker), the
//     Files subtest checks them under Facts.Workspace: contents, modes,
//     nanosecond times, links, and the box-side errnos ENOENT, EEXIST,
//     ENOTEMPTY, EISDIR and ENOTDIR kept as the errors' causes. A box
//     without Files skips that subtest.
//   - Reconnect: Attach of a box from a fresh provider (Harness.Reopen), as
//     a new process would after the one that made the box died with a
//     command running, finds the box running, takes commands, and leaves
//     that command running.
//
// # Optional abilities
//
// Each optional interface has its subtests, which every provider runs: one
// without the interface passes them by claiming nothing (its boxes' Facts.
// Suspend is empty; a provider that is no Snapshotter lists spec field
// snapshot in Harness.Unsupported) and logs "unsupported".
//
//   - Suspend (providers.Suspender): Facts.Suspend says what a suspend
//     keeps. Suspending a box with a command running ends that command
//     within a bound; the box is then stopped (or, kept as a snapshot, not
//     running); Resume returns a running box (the same ID unless it was
//     kept as a snapshot) with the file written before, without the
//     processes of the command that ran (for a box that keeps only its
//     filesystem), and suspends and resumes again.
//   - SuspendErrors: Resume of an id never suspended is NotFound; Suspend of
//     a destroyed box is Gone.
//   - SuspendLifetime: a box suspended at once and resumed after its
//     lifetime (Harness.Lifetime, at least 10 s) is Gone (or NotFound): the
//     lifetime counts from when the box was made.
//   - Snapshot (providers.Snapshotter): a box made with Spec.Snapshot set to
//     the id Snapshot returned has the file as it was at the snapshot, the
//     box the snapshot was taken of runs on with its own changes, and a
//     snapshot that does not exist is refused by Create (NotFound, or
//     Invalid where the vendor answers it as a bad request).
//
// # The programs the suite runs
//
// The suite assumes a POSIX sh and coreutils in the box, and runs exactly
// these argv and nothing else (a fake provider can register a function for
// each):
//
//	printf '%s\0' ARG...                  each ARG followed by a NUL byte (PrintfNUL is the format)
//	cat                                   copy stdin to stdout
//	cat FILE                              print FILE
//	env                                   print the environment, NAME=value per line
//	pwd                                   print the working directory and a newline
//	sh -c ScriptExit sh N                 exit with status N (0..255)
//	sh -c ScriptSignal sh SIG             kill itself with SIG (TERM or KILL)
//	sh -c ScriptGroup                     print the pids of two background sleeps and of
//	                                      itself, one per line, then wait for ever
//	sh -c ScriptAlive sh PID...           print those PIDs that are alive and not zombies
//	sh -c ScriptLarge sh N                write the same N random bytes to stdout and stderr
//	sh -c ScriptSleepPrint sh SECS TEXT   sleep SECS seconds, then print TEXT
//	sh -c ScriptHomeWrite sh TEXT         write TEXT to $HOME/boxfs-conformance-file
//	sh -c ScriptHomeCat sh                print $HOME/boxfs-conformance-file
//	boxfs-conformance-no-such-program     does not exist: NotFound from Exec or Wait, or exit 127
//
// # Harness knobs
//
// See Harness: Provider, Spec (the base of every box), Unsupported (spec
// fields refused, each tried with a sample value of the suite's choosing),
// Refused (further specs refused, for fields supported only in part),
// NoStdin, StagedStdin, OutputAtEnd (a command's output arrives when it
// ends: the kill subtests check that the group's work stops, with
// ScriptTicks and ScriptStill), Serial (one command at a time: the
// concurrency subtest checks they never overlap, with ScriptAlone),
// Lifetime and LifetimeSlack, LargeOutput, Reopen, RemoveSnapshot.
package providertest

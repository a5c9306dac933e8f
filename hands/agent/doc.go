// Package agent is boxfs's side of the agent channel: the SFTP server that
// runs inside a box (the same static binary, "boxfs agent") and the client
// that speaks to it over one long-lived exec.
//
// # Pieces
//
//   - Main and Serve: the agent. pkg/sftp's request server with handlers on
//     the box's file system, rooted at "/". It serves stdin/stdout until
//     stdin closes, writes nothing else to stdout (file descriptor 1 is
//     pointed at stderr once the protocol stream is set aside), and with
//     -sha256 refuses to serve unless its own binary has that checksum.
//   - Client: providers.Files and providers.Walker over one stream pair,
//     with a liveness watchdog (pkg/sftp's client has no timeouts).
//   - Channel: a Client to one box that uploads the binary, starts the
//     agent, notices its death, kills it when hung and restarts it on a
//     later call.
//   - SelfBinary: the running program, when it can serve as the agent.
//   - The direct channel (direct.go): where the box is a
//     providers.DirectDialer (a Docker container), the requests go over a
//     connection the host dials (a unix socket under the container's root,
//     or its address on a bridge network) after a handshake on the exec's
//     stdio with a one-time secret; the exec stays the agent's lifeline,
//     and its stdio the fallback when no route connects.
//
// # Protocol
//
// SFTP v3 with 128 KiB packets, pipelined, plus what boxfs owns:
//
//   - Every attribute block carries the extended attribute stat-ns@boxfs:
//     st_mode, uid, gid, nlink, size, mtime, atime and ctime in
//     nanoseconds, ino, dev and rdev (72 bytes, big-endian). SFTP's own fields
//     carry mtime in whole seconds and no inode. LSTAT answers carry a
//     symlink's target in target@boxfs.
//   - SETSTAT with utimes-ns@boxfs sets atime and mtime to the nanosecond,
//     leaving a zero time as it is.
//   - A failed system call answers with the status code 0x6278xxxx whose low
//     16 bits are the Linux errno, and the message "errno=<n>: <text>".
//     SFTP v3's codes lose the errno (ENOTEMPTY is a plain failure), and
//     pkg/sftp's client keeps the message only inside its error text, so
//     the client reads the code; it never parses text.
//   - Paths under ReservedDir ("/.boxfs-agent/<op>?<query>") name
//     operations SFTP lacks, each one round trip: a tree or directory
//     listing with attributes and symlink targets (STAT walk, list), a read
//     of up to 192 KiB (STAT read), a SHA-256 (STAT sha256), an atomic
//     replace carrying the data (SETSTAT write), a write at an offset
//     (SETSTAT pwrite), mkdir, create and mknod with a mode, unlink (SFTP's REMOVE
//     may remove a directory), fsync, and chmod, chown, utimes and unlink
//     answered with the attributes they left (setattr, unlinkstat), and
//     many unlinks and rmdirs done in order, answered with an errno each
//     (removes). An agent answers an operation it lacks as unsupported (an
//     agent without these three answers them a failure with no errno, which
//     the client takes so), and the caller falls back to the plain calls.
//     Data rides in the data@boxfs
//     extended attribute. Larger data goes through OPEN, concurrent READs
//     or WRITEs and CLOSE; a large atomic replace is an OPEN of
//     "atomic?path=..." whose CLOSE renames the temporary file into place
//     (an FSETSTAT with abort@boxfs, or a broken session, drops it). The
//     query is url-encoded, so pkg/sftp's path cleaning leaves it alone.
//     A real file under ReservedDir cannot be reached through the channel;
//     the client refuses such paths as Unsupported.
//
// # Liveness
//
// The client counts packets on the stream: when a request is outstanding
// and nothing has arrived from the agent for the liveness bound, the agent
// is taken for hung, the stream is closed and every call in flight returns
// Liveness. A caller's own deadline returns Timeout (or Aborted on
// cancellation) without tearing the channel down. An operation the box
// itself takes longer than the bound to answer (an fsync of a huge file)
// counts as hung: the bound is set generously (10 s by default).
//
// # Mode bits
//
// Mkdir, Create, Mknod and a new file of WriteFile get their mode under the
// agent's umask, as open(2) and mkdir(2) (and the os package) do; Chmod
// sets bits exactly. WriteFile keeps the mode, and where the agent may the
// owner, of a file it replaces.
package agent

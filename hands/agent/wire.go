package agent

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/pkg/sftp"
)

// This file is the protocol the client and the server share on top of SFTP
// v3. Both sides are built from the same source, so the formats below carry
// no version negotiation: a box runs the agent whose sha256 the host names.

// ReservedDir is the directory whose paths the agent serves itself instead
// of the box's file system: "/.boxfs-agent/<op>?<query>". A real file under
// it cannot be reached through the channel.
//
// pkg/sftp's request server cleans every request path with filepath.Clean
// before a handler sees it. The query is url.Values-encoded, which escapes
// '/' as %2F, so the part after the op holds no slash and Clean leaves it
// byte for byte (tested in wire_test.go).
const ReservedDir = "/.boxfs-agent"

// The operations served under ReservedDir, by the SFTP request that carries
// them. Every small operation is one round trip: SFTP's OPEN, READ, CLOSE
// sequence (three) is used only for data larger than inlineMax.
const (
	// STAT: queries whose answer rides in extended attributes of the
	// attribute block (the block itself describes the file, where there is
	// one).
	opSHA256 = "sha256" // path; answer in extSHA256
	opRead   = "read"   // path, off, len (<= inlineMax); answer in extData, short at EOF
	opWalk   = "walk"   // root; the listing in extData, or extSize when larger than inlineMax
	opList   = "list"   // dir; as opWalk, one level
	// dir, n (repeated base names), max; the small files' records in
	// extData (see appendSmallRecord)
	opReadSmall = "readsmall"
	// SETSTAT: mutations answered by a status alone; data in extData.
	opMkdir  = "mkdir"  // path, perm
	opCreate = "create" // path, perm, excl=1
	opUnlink = "unlink" // path
	opFsync  = "fsync"  // path
	opWrite  = "write"  // path, perm, id; extData replaces the file atomically
	opPwrite = "pwrite" // path, off; extData written at off
	// path, tmp (a ".boxfs-tmp-" name beside it that the box's bulk path
	// wrote), and opWrite's options: tmp replaces path as an opAtomic's
	// CLOSE would.
	opCommit = "commit"
	// rename(2) of path to to; with stat=1 its success answers the
	// attributes of to, of to's directory and of path's directory when it
	// is another, in that order (statsStatusMessage).
	opRename = "rename" // path, to
	// A named pipe, socket or device: mknod(2) of path with mode (the
	// st_mode, type bits included, in octal) and dev (decimal dev_t).
	opMknod = "mknod" // path, mode, dev
	// A symbolic link's own owner and times, never following it (a
	// dangling link works): lchown(2) and utimensat(2) with
	// AT_SYMLINK_NOFOLLOW. A missing uid, gid, atime or mtime is left as
	// it is.
	opLchown  = "lchown"  // path, uid, gid
	opLutimes = "lutimes" // path, atime, mtime (ns since the epoch, decimal)
	// chown(2), chmod(2) and utimensat(2) of path, following a final
	// symlink, in that order (chown clears the setuid and setgid bits),
	// each only when the query has its fields; answered, with stat=1, by
	// the attributes Lstat then gives (statStatusCode). A missing uid,
	// gid, mode, atime or mtime is left as it is.
	opSetattr = "setattr" // path, uid, gid, mode (octal), atime, mtime
	// unlink(2) of path answered by the attributes of the file it named
	// as an fstat after the unlink finds them (statStatusCode; nlink 0
	// when no name is left): the file is opened (O_PATH, not following a
	// symlink) before the unlink.
	opUnlinkStat = "unlinkstat" // path
	// unlink(2) or rmdir(2) of each entry of extData in order, answered by
	// an errno each (see batchremove.go).
	opRemoves = "removes" // path (the first entry's)
	// OPEN for writing, WRITE, CLOSE: a file larger than inlineMax, replaced
	// atomically at CLOSE (path, perm, id). An FSETSTAT with extAbort on its
	// handle drops it instead.
	opAtomic = "atomic"
	// OPEN for reading, READ: opWalk and opList listings larger than
	// inlineMax.
)

// inlineMax is the most data one request or answer carries inline; with
// headers and a path it stays well under pkg/sftp's 256 KiB packet limit.
const inlineMax = 192 << 10

// Extended attribute names.
const (
	// extStatNS is on every attribute block the agent sends (STAT, LSTAT,
	// FSTAT, every READDIR entry): the fields SFTP v3 lacks or truncates.
	extStatNS = "stat-ns@boxfs"
	// extUtimesNS in a SETSTAT sets atime and mtime to the nanosecond.
	extUtimesNS = "utimes-ns@boxfs"
	// extSHA256 carries the 32-byte digest answering opSHA256.
	extSHA256 = "sha256@boxfs"
	// extAbort in an FSETSTAT on an opAtomic handle drops the temporary file
	// at CLOSE instead of renaming it into place.
	extAbort = "abort@boxfs"
	// extTarget carries a symlink's target on an LSTAT answer.
	extTarget = "target@boxfs"
	// extData carries file bytes or a listing, inline.
	extData = "data@boxfs"
	// extSize answers opWalk and opList when the listing is too large to
	// carry inline: its size in decimal; the client reads it through OPEN.
	extSize = "size@boxfs"
)

// syntheticPath builds the request path of a reserved operation.
func syntheticPath(op string, q url.Values) string {
	return ReservedDir + "/" + op + "?" + q.Encode()
}

// parseSynthetic splits a request path under ReservedDir into its op and
// query. ok is false for any other path.
func parseSynthetic(p string) (op string, q url.Values, ok bool, err error) {
	rest, found := strings.CutPrefix(p, ReservedDir+"/")
	if !found {
		return "", nil, false, nil
	}
	op, raw, _ := strings.Cut(rest, "?")
	q, err = url.ParseQuery(raw)
	return op, q, true, err
}

// statNS is the payload of extStatNS, 72 bytes big-endian:
//
//	mode u32 (Linux st_mode) | uid u32 | gid u32 | nlink u32 | size i64 |
//	mtime i64 ns | atime i64 ns | ctime i64 ns | ino u64 | dev u64 | rdev u64
type statNS struct {
	Mode, UID, GID, Nlink uint32
	Size                  int64
	Mtime, Atime, Ctime   int64
	Ino, Dev, Rdev        uint64
}

const statNSLen = 72

func (s statNS) marshal() string {
	b := make([]byte, 0, statNSLen)
	b = binary.BigEndian.AppendUint32(b, s.Mode)
	b = binary.BigEndian.AppendUint32(b, s.UID)
	b = binary.BigEndian.AppendUint32(b, s.GID)
	b = binary.BigEndian.AppendUint32(b, s.Nlink)
	b = binary.BigEndian.AppendUint64(b, uint64(s.Size))
	b = binary.BigEndian.AppendUint64(b, uint64(s.Mtime))
	b = binary.BigEndian.AppendUint64(b, uint64(s.Atime))
	b = binary.BigEndian.AppendUint64(b, uint64(s.Ctime))
	b = binary.BigEndian.AppendUint64(b, s.Ino)
	b = binary.BigEndian.AppendUint64(b, s.Dev)
	b = binary.BigEndian.AppendUint64(b, s.Rdev)
	return string(b)
}

func unmarshalStatNS(d string) (statNS, error) {
	if len(d) != statNSLen {
		return statNS{}, fmt.Errorf("%s: %d bytes, want %d", extStatNS, len(d), statNSLen)
	}
	b := []byte(d)
	u32 := func(i int) uint32 { return binary.BigEndian.Uint32(b[i:]) }
	u64 := func(i int) uint64 { return binary.BigEndian.Uint64(b[i:]) }
	return statNS{
		Mode: u32(0), UID: u32(4), GID: u32(8), Nlink: u32(12),
		Size:  int64(u64(16)),
		Mtime: int64(u64(24)), Atime: int64(u64(32)), Ctime: int64(u64(40)),
		Ino: u64(48), Dev: u64(56), Rdev: u64(64),
	}, nil
}

// info converts the wire stat to a FileInfo named name.
func (s statNS) info(name string) providers.FileInfo {
	return providers.FileInfo{
		Name:  name,
		Mode:  providers.FileModeFromUnix(s.Mode),
		Size:  s.Size,
		Mtime: time.Unix(0, s.Mtime),
		Atime: time.Unix(0, s.Atime),
		Ctime: time.Unix(0, s.Ctime),
		Ino:   s.Ino,
		Nlink: s.Nlink,
		UID:   s.UID,
		GID:   s.GID,
		Dev:   s.Dev,
		Rdev:  s.Rdev,
	}
}

// utimeOmit in an extUtimesNS payload leaves that time unchanged.
const utimeOmit = math.MinInt64

// marshalUtimes encodes atime and mtime (16 bytes big-endian, ns since the
// epoch); a zero time becomes utimeOmit.
func marshalUtimes(atime, mtime time.Time) string {
	ns := func(t time.Time) int64 {
		if t.IsZero() {
			return utimeOmit
		}
		return t.UnixNano()
	}
	b := binary.BigEndian.AppendUint64(nil, uint64(ns(atime)))
	b = binary.BigEndian.AppendUint64(b, uint64(ns(mtime)))
	return string(b)
}

func unmarshalUtimes(d string) (atime, mtime int64, err error) {
	if len(d) != 16 {
		return 0, 0, fmt.Errorf("%s: %d bytes, want 16", extUtimesNS, len(d))
	}
	return int64(binary.BigEndian.Uint64([]byte(d))), int64(binary.BigEndian.Uint64([]byte(d[8:]))), nil
}

// Errno preservation. SFTP v3 status codes lose the errno (ENOTEMPTY is
// SSH_FX_FAILURE), and pkg/sftp's client keeps a status message only inside
// its error text and turns codes 2 and 3 into bare os errors. So the agent
// answers a failed system call with the status code errnoStatusBase|errno,
// a code in a range SFTP does not use, and with the message
// "errno=<n>: <strerror>" for people reading logs. The client decides by
// the code alone. Errno numbers are Linux's: a box is Linux.
const (
	errnoStatusBase uint32 = 0x62780000 // "bx\0\0"
	errnoStatusMask uint32 = 0xffff0000
)

func errnoStatusCode(errno syscall.Errno) uint32 { return errnoStatusBase | uint32(errno)&0xffff }

// errnoFromStatus returns the errno a status code carries.
func errnoFromStatus(code uint32) (uint32, bool) {
	if code&errnoStatusMask != errnoStatusBase || code&0xffff == 0 {
		return 0, false
	}
	return code & 0xffff, true
}

// Answers with attributes. A mutation asked with "stat=1" in its query
// (opCreate, opMkdir, opWrite, opAtomic's CLOSE) answers its success with
// the status code statStatusCode and, as the message, the hex of the
// statNS Lstat gives of the path afterwards: the caller records the file
// without a second round trip. SFTP v3's STATUS answer has no other field
// that reaches pkg/sftp's client; its StatusError keeps the message inside
// its Error text, which statFromStatus reads back (tested against the
// pinned pkg/sftp in wire_test.go). When the Lstat after a success fails,
// the answer is a plain OK and the caller asks itself.
const statStatusCode uint32 = 0x62790000 // "by\0\0"

// statStatusMessage is the message of a statStatusCode answer.
func statStatusMessage(s statNS) string { return statsStatusMessage([]statNS{s}) }

// statsStatusMessage is the message of a statStatusCode answer with the
// attributes of several paths, one statNS after another.
func statsStatusMessage(ss []statNS) string {
	var b []byte
	for _, s := range ss {
		b = append(b, s.marshal()...)
	}
	return hex.EncodeToString(b)
}

// statsFromStatus returns the attributes a statStatusCode answer carries,
// one or more. ok is false for any other error; err is set for a
// malformed one.
func statsFromStatus(e error) (ss []statNS, ok bool, err error) {
	var se *sftp.StatusError
	if !errors.As(e, &se) || se.Code != statStatusCode {
		return nil, false, nil
	}
	msg, found := statusMessage(se)
	if !found {
		return nil, true, errBadAnswer
	}
	raw, herr := hex.DecodeString(msg)
	if herr != nil || len(raw) == 0 || len(raw)%statNSLen != 0 {
		return nil, true, errBadAnswer
	}
	for len(raw) > 0 {
		s, uerr := unmarshalStatNS(string(raw[:statNSLen]))
		if uerr != nil {
			return nil, true, errBadAnswer
		}
		ss = append(ss, s)
		raw = raw[statNSLen:]
	}
	return ss, true, nil
}

// statFromStatus returns the attributes a statStatusCode answer carries.
// ok is false for any other error; err is set for a malformed one.
func statFromStatus(e error) (s statNS, ok bool, err error) {
	var se *sftp.StatusError
	if !errors.As(e, &se) || se.Code != statStatusCode {
		return statNS{}, false, nil
	}
	msg, found := statusMessage(se)
	if !found {
		return statNS{}, true, errBadAnswer
	}
	raw, herr := hex.DecodeString(msg)
	if herr != nil {
		return statNS{}, true, errBadAnswer
	}
	s, uerr := unmarshalStatNS(string(raw))
	if uerr != nil {
		return statNS{}, true, errBadAnswer
	}
	return s, true, nil
}

// errnoMessage is the status message for errno.
func errnoMessage(errno syscall.Errno) string {
	return "errno=" + strconv.Itoa(int(errno)) + ": " + errno.Error()
}

// The answer to opReadSmall: one record per regular file read whole,
//
//	name length u16 | name | statNS (64 bytes, fstat of the open file) | data length u32 | data
//
// big-endian; names missing, not regular, changed while read, or past the
// byte budget are left out.

// smallMax is the most file data one opReadSmall answer carries.
const smallMax = 160 << 10

func appendSmallRecord(b []byte, name string, s statNS, data []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(name)))
	b = append(b, name...)
	b = append(b, s.marshal()...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// smallFile is one record of an opReadSmall answer.
type smallFile struct {
	name string
	st   statNS
	data []byte
}

func parseSmall(b []byte) ([]smallFile, error) {
	var out []smallFile
	for len(b) > 0 {
		if len(b) < 2 {
			return nil, errBadListing
		}
		n := int(binary.BigEndian.Uint16(b))
		b = b[2:]
		if len(b) < n+statNSLen+4 {
			return nil, errBadListing
		}
		name := string(b[:n])
		st, err := unmarshalStatNS(string(b[n : n+statNSLen]))
		if err != nil {
			return nil, errBadListing
		}
		b = b[n+statNSLen:]
		dl := int(binary.BigEndian.Uint32(b))
		b = b[4:]
		if len(b) < dl || name == "" || strings.Contains(name, "/") {
			return nil, errBadListing
		}
		out = append(out, smallFile{name: name, st: st, data: b[:dl:dl]})
		b = b[dl:]
	}
	return out, nil
}

// The walk listing, answering opWalk and opList: one record per entry,
//
//	"<st_mode> <size> <mtime ns> <atime ns> <ctime ns> <ino> <nlink> <uid> <gid> <dev> <rdev>" NUL
//	<path relative to the root, or the base name for opList> NUL
//	<symlink target, empty for anything else> NUL
//
// numbers in decimal; parents come before children and siblings in byte
// order of their names.

// appendWalkRecord appends one record to b.
func appendWalkRecord(b []byte, s statNS, rel, target string) []byte {
	b = strconv.AppendUint(b, uint64(s.Mode), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.Size, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.Mtime, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.Atime, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, s.Ctime, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, s.Ino, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(s.Nlink), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(s.UID), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(s.GID), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, s.Dev, 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, s.Rdev, 10)
	b = append(b, 0)
	b = append(b, rel...)
	b = append(b, 0)
	b = append(b, target...)
	return append(b, 0)
}

var errBadListing = errors.New("malformed walk listing")

// parseWalk decodes a listing.
func parseWalk(b []byte) ([]providers.FileInfo, error) {
	var out []providers.FileInfo
	for len(b) > 0 {
		var fields [3][]byte
		for i := range fields {
			j := bytes.IndexByte(b, 0)
			if j < 0 {
				return nil, errBadListing
			}
			fields[i], b = b[:j], b[j+1:]
		}
		nums := bytes.Fields(fields[0])
		if len(nums) != 11 || len(fields[1]) == 0 {
			return nil, errBadListing
		}
		var v [11]int64
		for i, n := range nums {
			var err error
			if i == 5 || i >= 9 { // ino, dev, rdev: unsigned 64-bit
				var u uint64
				u, err = strconv.ParseUint(string(n), 10, 64)
				v[i] = int64(u)
			} else {
				v[i], err = strconv.ParseInt(string(n), 10, 64)
			}
			if err != nil {
				return nil, errBadListing
			}
		}
		s := statNS{
			Mode: uint32(v[0]), Size: v[1], Mtime: v[2], Atime: v[3], Ctime: v[4],
			Ino: uint64(v[5]), Nlink: uint32(v[6]), UID: uint32(v[7]), GID: uint32(v[8]), Dev: uint64(v[9]), Rdev: uint64(v[10]),
		}
		fi := s.info(string(fields[1]))
		fi.Target = string(fields[2])
		out = append(out, fi)
	}
	return out, nil
}

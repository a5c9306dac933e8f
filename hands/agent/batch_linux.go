package agent

import (
	"archive/tar"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net/url"
	"os"
	"path"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/boxfs/boxfs/providers"
)

// batchAnswer is a batch's success: one record per member (see batch.go).
type batchAnswer struct{ raw []byte }

func (a *batchAnswer) Error() string { return hex.EncodeToString(a.raw) }

func (a *batchAnswer) As(target any) bool {
	v := reflect.ValueOf(target)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Type() != fxerrType {
		return false
	}
	v.Elem().SetUint(uint64(batchStatusCode))
	return true
}

// applyBatch writes each member of the tar stream r as an opWrite of the
// query its PAX record holds, and answers with each one's result. A stream
// that is not such a tar, or holds more than batchMax members, is EINVAL
// (the members before the fault are written and said so: none is left
// half written).
func (h *handlers) applyBatch(r io.Reader) error {
	tr := tar.NewReader(r)
	var raw []byte
	for n := 0; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil || n >= batchMax || (hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeDir) {
			return errnoErr(syscall.EINVAL)
		}
		q, err := url.ParseQuery(hdr.PAXRecords[batchQuery])
		if err != nil {
			return errnoErr(syscall.EINVAL)
		}
		q.Set("id", providers.NewID(8))
		q.Set("stat", "1")
		if hdr.Typeflag == tar.TypeDir {
			raw = appendBatchRecord(raw, q.Get("path"), writeDirMember(q))
			continue
		}
		raw = appendBatchRecord(raw, q.Get("path"), h.writeMember(q, tr))
	}
	return &batchAnswer{raw}
}

// writeMember writes one member's data atomically as q says, and returns
// what its CLOSE answers.
func (h *handlers) writeMember(q url.Values, data io.Reader) error {
	a, err := h.newAtomic(q)
	if err != nil {
		return err
	}
	if _, err := io.Copy(io.NewOffsetWriter(a, 0), data); err != nil {
		a.fail(err)
	}
	return a.Close()
}

// writeDirMember makes the directory q names ("make=1", when missing) and
// gives it q's owner, mode ("force=1") and times, then answers its
// attributes.
func writeDirMember(q url.Values) error {
	p := q.Get("path")
	perm, err := strconv.ParseUint(q.Get("perm"), 8, 32)
	if !path.IsAbs(p) || err != nil || perm > 0o7777 {
		return errnoErr(syscall.EINVAL)
	}
	uid, gid, chown, err := ownerQuery(q)
	if err != nil {
		return err
	}
	times, err := timesQuery(q)
	if err != nil {
		return err
	}
	if q.Get("make") == "1" {
		if err := unix.Mkdir(p, uint32(perm)); err != nil {
			var st unix.Stat_t
			if err != syscall.EEXIST || unix.Lstat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return toWire(err)
			}
		}
	}
	if chown {
		if err := unix.Lchown(p, uid, gid); err != nil {
			return toWire(err)
		}
	}
	if q.Get("force") == "1" {
		// After the owner: chown clears the setuid and setgid bits.
		if err := unix.Chmod(p, uint32(perm)); err != nil {
			return toWire(err)
		}
	}
	if times != nil {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, times, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return toWire(err)
		}
	}
	return answerStat(q, p)
}

// appendBatchRecord appends the answer of one member written to p: its
// errno, or 0 and its attributes.
func appendBatchRecord(raw []byte, p string, err error) []byte {
	var st unix.Stat_t
	var s statNS
	var sa *statAnswer
	var we *wireError
	errno := uint32(0)
	switch {
	case errors.As(err, &sa):
		s = sa.s
	case errors.As(err, &we):
		errno = uint32(we.errno)
	case err != nil:
		errno = uint32(syscall.EIO)
	case unix.Lstat(p, &st) == nil:
		s = statNSOf(&st)
	default:
		errno = uint32(syscall.ENOENT) // written, and gone at once
	}
	raw = binary.BigEndian.AppendUint32(raw, errno)
	return append(raw, s.marshal()...)
}

// batchFile receives a batch larger than inlineMax: its tar stream goes
// to an unlinked temporary file, applied at CLOSE (dropped if an FSETSTAT
// with extAbort came first or the transfer failed).
type batchFile struct {
	h  *handlers
	id string
	f  *os.File

	mu     sync.Mutex
	failed error
}

func (h *handlers) newBatch(q url.Values) (*batchFile, error) {
	id := q.Get("id")
	if id == "" || strings.ContainsRune(id, '/') {
		return nil, errnoErr(syscall.EINVAL)
	}
	f, err := os.CreateTemp("", ".boxfs-batch-")
	if err != nil {
		return nil, toWire(err)
	}
	os.Remove(f.Name())
	b := &batchFile{h: h, id: id, f: f}
	h.mu.Lock()
	h.batches[id] = b
	h.mu.Unlock()
	return b, nil
}

func (b *batchFile) fail(err error) {
	b.mu.Lock()
	if b.failed == nil {
		b.failed = err
	}
	b.mu.Unlock()
}

func (b *batchFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := b.f.WriteAt(p, off)
	if err != nil {
		b.fail(err)
	}
	return n, toWire(err)
}

func (b *batchFile) ReadAt(p []byte, off int64) (int, error) { return 0, errnoErr(syscall.EBADF) }

// TransferError is called by pkg/sftp when the session ends with the file
// still open.
func (b *batchFile) TransferError(err error) { b.fail(err) }

func (b *batchFile) Close() error {
	b.h.mu.Lock()
	delete(b.h.batches, b.id)
	b.h.mu.Unlock()
	defer b.f.Close()
	b.mu.Lock()
	failed := b.failed
	b.mu.Unlock()
	switch {
	case failed == errAborted:
		return nil
	case failed != nil:
		return toWire(failed)
	}
	if _, err := b.f.Seek(0, io.SeekStart); err != nil {
		return toWire(err)
	}
	return b.h.applyBatch(b.f)
}

// abortBatch marks the open batch q names to be dropped at CLOSE.
func (h *handlers) abortBatch(q url.Values) error {
	h.mu.Lock()
	b := h.batches[q.Get("id")]
	h.mu.Unlock()
	if b != nil {
		b.fail(errAborted)
	}
	return nil
}

package hands

import (
	"archive/tar"
	"context"
	"io"

	"github.com/boxfs/boxfs/internal/shell"
	"github.com/boxfs/boxfs/providers"
)

// ROOT NAME...; prints K, then the tar of the names (none: an empty tar).
// The GetFiles of a box without stdin; GNU tar, as scriptGetFiles.
const scriptGetFilesArgs = `p=$1
shift
par "$p"
[ -e "$p" ] || unres "$p"
[ -d "$p" ] || e 20
case $(tar --version 2>/dev/null) in *"GNU tar"*) ;; *) echo "GNU tar needed" >&2; exit 126 ;; esac
printf K
[ $# -gt 0 ] || exec tar -C "$p" -cf - -T /dev/null
exec tar -C "$p" --no-recursion -cf - -- "$@"
`

// argBatchMax is the most bytes of escaped names one exec of
// scriptGetFilesArgs carries. With the script, its argv stays far under
// Linux's 128 KiB limit on one argument even where a provider sends the
// whole argv as one shell command that quotes a byte in up to four.
const argBatchMax = 24 << 10

// trailMax is the most bytes read past the end of one batch's archive
// (tar pads it to its record size) before the script's end.
const trailMax = 64 << 10

// getFilesByArgs makes GetFiles's tar on a box that takes no stdin: the
// names go as arguments, in batches of at most argBatchMax escaped bytes,
// one exec each, run one after another; the batches' members are written
// out as one tar. The first batch has started (or failed) when it returns.
func (s *scripts) getFilesByArgs(ctx context.Context, op, root string, paths []string) (io.ReadCloser, error) {
	batches := argBatches(paths)
	first, err := s.stream(ctx, op, root, scriptGetFilesArgs, nil, append([]string{root}, batches[0]...)...)
	if err != nil || len(batches) == 1 {
		return first, err
	}
	sctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := s.joinBatches(sctx, op, root, first, batches[1:], pw)
		pw.CloseWithError(err)
		done <- err
	}()
	return &streamReader{pr: pr, cancel: cancel, done: done}, nil
}

// argBatches splits paths into batches of at most argBatchMax escaped
// bytes (a longer name goes alone); there is always one batch.
func argBatches(paths []string) [][]string {
	batches := [][]string{nil}
	size := 0
	for _, p := range paths {
		n := len(shell.Escape(p)) + 1
		if last := batches[len(batches)-1]; len(last) > 0 && size+n > argBatchMax {
			batches, size = append(batches, nil), 0
		}
		batches[len(batches)-1] = append(batches[len(batches)-1], p)
		size += n
	}
	return batches
}

// joinBatches writes the members of first, then of each further batch's
// archive, to w as one tar, and ends it.
func (s *scripts) joinBatches(ctx context.Context, op, root string, first io.ReadCloser, rest [][]string, w io.Writer) error {
	tw := tar.NewWriter(w)
	r := first
	for i := 0; ; i++ {
		err := copyMembers(tw, r)
		if err == nil {
			err = drain(op, s.box.ID(), root, r)
		}
		r.Close()
		if err != nil {
			return err
		}
		if i == len(rest) {
			return tw.Close()
		}
		if r, err = s.stream(ctx, op, root, scriptGetFilesArgs, nil, append([]string{root}, rest[i]...)...); err != nil {
			return err
		}
	}
}

// copyMembers writes every member of the tar r to tw.
func copyMembers(tw *tar.Writer, r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		hdr.Format = tar.FormatUnknown // the writer picks one that holds the header
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
}

// drain reads what follows a batch's archive up to the script's end, so
// that the script's own failure is not lost; more than trailMax is an
// error.
func drain(op, box, root string, r io.Reader) error {
	n, err := io.Copy(io.Discard, io.LimitReader(r, trailMax+1))
	if err != nil {
		return err
	}
	if n > trailMax {
		return providers.Errorf(providers.Unknown, op, "the archive of a batch of names goes on past its end").WithBox(box).WithPath(root)
	}
	return nil
}

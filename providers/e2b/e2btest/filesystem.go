package e2btest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/boxfs/boxfs/providers/e2b/internal/envd/filesystem"
)

type filesystemService struct {
	s *Server

	mu       sync.Mutex
	watchers map[string]*pollWatcher
}

// entryInfo describes a path without following a final symlink, as
// envd's Stat, MakeDir and Move answer.
func entryInfo(p string) (*filesystem.EntryInfo, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("file not found: %w", err))
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error getting file info: %w", err))
	}
	e := &filesystem.EntryInfo{
		Name: fi.Name(), Type: fileType(fi.Mode()), Path: p, Size: fi.Size(),
		Mode: uint32(fi.Mode()), Permissions: fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	e.Owner, e.Group = ownership(fi)
	if fi.Mode()&fs.ModeSymlink != 0 {
		if t, err := os.Readlink(p); err == nil {
			e.SymlinkTarget = &t
		}
	}
	return e, nil
}

func fileType(m fs.FileMode) filesystem.FileType {
	switch {
	case m.IsRegular():
		return filesystem.FileType_FILE_TYPE_FILE
	case m.IsDir():
		return filesystem.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return filesystem.FileType_FILE_TYPE_SYMLINK
	}
	return filesystem.FileType_FILE_TYPE_UNSPECIFIED
}

// ownership names a file's owner and group, or gives their numbers.
func ownership(fi fs.FileInfo) (string, string) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", ""
	}
	o, g := strconv.Itoa(int(st.Uid)), strconv.Itoa(int(st.Gid))
	if u, err := user.LookupId(o); err == nil {
		o = u.Username
	}
	if gr, err := user.LookupGroupId(g); err == nil {
		g = gr.Name
	}
	return o, g
}

func (f *filesystemService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	e, err := entryInfo(sandboxFrom(ctx).resolve(req.Msg.GetPath()))
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.StatResponse{Entry: e}), nil
}

func (f *filesystemService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	p := sandboxFrom(ctx).resolve(req.Msg.GetPath())
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", p))
	}
	if err := os.MkdirAll(p, 0o755); err != nil {
		return nil, connect.NewError(connect.CodeInternal, err)
	}
	return connect.NewResponse(&filesystem.MakeDirResponse{Entry: &filesystem.EntryInfo{Name: filepath.Base(p), Type: filesystem.FileType_FILE_TYPE_DIRECTORY, Path: p}}), nil
}

func (f *filesystemService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	sb := sandboxFrom(ctx)
	src, dst := sb.resolve(req.Msg.GetSource()), sb.resolve(req.Msg.GetDestination())
	if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("source file not found: %w", err))
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error creating destination directory: %w", err))
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error renaming: %w", err))
	}
	e, err := entryInfo(dst)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&filesystem.MoveResponse{Entry: e}), nil
}

func (f *filesystemService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	requested := sandboxFrom(ctx).resolve(req.Msg.GetPath())
	resolved, err := filepath.EvalSymlinks(requested)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("path not found: %w", err))
		}
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error resolving symlink: %w", err))
	}
	if fi, err := os.Stat(resolved); err != nil || !fi.IsDir() {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path is not a directory: %s", requested))
	}
	var entries []*filesystem.EntryInfo
	err = filepath.WalkDir(resolved, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == resolved {
			return nil
		}
		rel, _ := filepath.Rel(resolved, p)
		if len(strings.Split(rel, string(filepath.Separator))) > depth {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := &filesystem.EntryInfo{
			Name: d.Name(), Type: fileType(fi.Mode()), Path: filepath.Join(requested, rel), Size: fi.Size(),
			Mode: uint32(fi.Mode().Perm()), Permissions: fi.Mode().String(), ModifiedTime: timestamppb.New(fi.ModTime()),
		}
		e.Owner, e.Group = ownership(fi)
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error reading directory %s: %w", resolved, err))
	}
	return connect.NewResponse(&filesystem.ListDirResponse{Entries: entries}), nil
}

func (f *filesystemService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	if err := os.RemoveAll(sandboxFrom(ctx).resolve(req.Msg.GetPath())); err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error removing file or directory: %w", err))
	}
	return connect.NewResponse(&filesystem.RemoveResponse{}), nil
}

// watchRoot checks what WatchDir and CreateWatcher are asked to watch.
func watchRoot(sb *sandbox, p string) (string, error) {
	root := sb.resolve(p)
	fi, err := os.Stat(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", connect.NewError(connect.CodeNotFound, fmt.Errorf("path %s not found: %w", root, err))
		}
		return "", connect.NewError(connect.CodeInternal, fmt.Errorf("error statting path %s: %w", root, err))
	}
	if !fi.IsDir() {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path %s not a directory", root))
	}
	return root, nil
}

// fsEvents turns one watcher event into envd's events, one per operation.
func fsEvents(root string, ev watchEvent, withEntry bool) []*filesystem.FilesystemEvent {
	name, err := filepath.Rel(root, ev.path)
	if err != nil {
		return nil
	}
	var out []*filesystem.FilesystemEvent
	for _, t := range ev.types {
		fe := &filesystem.FilesystemEvent{Name: name, Type: t}
		if withEntry {
			if e, err := entryInfo(ev.path); err == nil {
				fe.Entry = e
			}
		}
		out = append(out, fe)
	}
	return out
}

func (f *filesystemService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	sb := sandboxFrom(ctx)
	root, err := watchRoot(sb, req.Msg.GetPath())
	if err != nil {
		return err
	}
	w, err := newWatcher(root, req.Msg.GetRecursive())
	if err != nil {
		return connect.NewError(connect.CodeInternal, fmt.Errorf("error creating watcher: %w", err))
	}
	defer w.close()
	cut := newCutter(ctx)
	send := func(r *filesystem.WatchDirResponse) error {
		if err := stream.Send(r); err != nil {
			return connect.NewError(connect.CodeUnknown, fmt.Errorf("error sending event: %w", err))
		}
		cut.sent()
		return nil
	}
	if err := send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	tick := keepalive(req.Header())
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sb.goneCh():
			panic(http.ErrAbortHandler)
		case <-tick:
			if err := send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case err := <-w.errs:
			return connect.NewError(connect.CodeInternal, fmt.Errorf("watcher error: %w", err))
		case ev := <-w.events:
			for _, fe := range fsEvents(root, ev, req.Msg.GetIncludeEntry()) {
				if err := send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: fe}}); err != nil {
					return err
				}
			}
		}
	}
}

// pollWatcher is a watcher of CreateWatcher: its events wait for
// GetWatcherEvents.
type pollWatcher struct {
	w      *watcher
	mu     sync.Mutex
	events []*filesystem.FilesystemEvent
	err    error
}

func (f *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	root, err := watchRoot(sandboxFrom(ctx), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	w, err := newWatcher(root, req.Msg.GetRecursive())
	if err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("error creating watcher: %w", err))
	}
	pw := &pollWatcher{w: w}
	go func() {
		for {
			select {
			case <-w.done:
				return
			case err := <-w.errs:
				pw.mu.Lock()
				pw.err = err
				pw.mu.Unlock()
				return
			case ev := <-w.events:
				pw.mu.Lock()
				pw.events = append(pw.events, fsEvents(root, ev, req.Msg.GetIncludeEntry())...)
				pw.mu.Unlock()
			}
		}
	}()
	id := newID(16)
	f.mu.Lock()
	if f.watchers == nil {
		f.watchers = map[string]*pollWatcher{}
	}
	f.watchers[id] = pw
	f.mu.Unlock()
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

func (f *filesystemService) watcher(id string) (*pollWatcher, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if pw := f.watchers[id]; pw != nil {
		return pw, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher with id %s not found", id))
}

func (f *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	pw, err := f.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	pw.mu.Lock()
	defer pw.mu.Unlock()
	if pw.err != nil {
		return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("watcher error: %w", pw.err))
	}
	evs := pw.events
	pw.events = nil
	return connect.NewResponse(&filesystem.GetWatcherEventsResponse{Events: evs}), nil
}

func (f *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	pw, err := f.watcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	pw.w.close()
	f.mu.Lock()
	delete(f.watchers, req.Msg.GetWatcherId())
	f.mu.Unlock()
	return connect.NewResponse(&filesystem.RemoveWatcherResponse{}), nil
}

// fileAuth checks a /files request: the access token in the header, or a
// signature of the path, operation, user and token.
func fileAuth(r *http.Request, sb *sandbox, op string) error {
	q := r.URL.Query()
	if tok := r.Header.Get("X-Access-Token"); tok != "" {
		if tok != sb.token {
			return errors.New("access token present in header but does not match")
		}
		return nil
	}
	sig := q.Get("signature")
	if sig == "" {
		return errors.New("missing signature query parameter")
	}
	parts := []string{q.Get("path"), op, q.Get("username"), sb.token}
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || n < time.Now().Unix() {
			return errors.New("signature is already expired")
		}
		parts = append(parts, exp)
	}
	sum := sha256.Sum256([]byte(strings.Join(parts, ":")))
	if sig != "v1_"+strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=") {
		return errors.New("invalid signature")
	}
	return nil
}

// fileUser reads the username parameter; envd's default user is "user".
func fileUser(r *http.Request) (string, error) {
	u := r.URL.Query().Get("username")
	switch u {
	case "":
		return "user", nil
	case "root", "user":
		return u, nil
	}
	return "", fmt.Errorf("error looking up user '%s': unknown user", u)
}

func (s *Server) getFiles(w http.ResponseWriter, r *http.Request) {
	sb := sandboxFrom(r.Context())
	if err := fileAuth(r, sb, "read"); err != nil {
		jsonError(w, http.StatusUnauthorized, "%v", err)
		return
	}
	if _, err := fileUser(r); err != nil {
		jsonError(w, http.StatusUnauthorized, "%v", err)
		return
	}
	p := sb.resolve(r.URL.Query().Get("path"))
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		jsonError(w, http.StatusNotFound, "path '%s' does not exist", p)
		return
	case err != nil:
		jsonError(w, http.StatusInternalServerError, "error checking if path exists '%s': %v", p, err)
		return
	case fi.IsDir():
		jsonError(w, http.StatusBadRequest, "path '%s' is a directory", p)
		return
	}
	f, err := os.Open(p)
	if err != nil {
		jsonError(w, http.StatusInternalServerError, "error opening file '%s': %v", p, err)
		return
	}
	defer f.Close()
	w.Header().Set("Vary", "Accept-Encoding")
	http.ServeContent(w, r, p, fi.ModTime(), f)
}

// uploaded is one entry of POST /files's answer.
type uploaded struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
}

func (s *Server) postFiles(w http.ResponseWriter, r *http.Request) {
	sb := sandboxFrom(r.Context())
	if err := fileAuth(r, sb, "write"); err != nil {
		jsonError(w, http.StatusUnauthorized, "%v", err)
		return
	}
	if _, err := fileUser(r); err != nil {
		jsonError(w, http.StatusUnauthorized, "%v", err)
		return
	}
	param := r.URL.Query().Get("path")
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []uploaded
	switch {
	case mt == "application/octet-stream":
		if param == "" {
			jsonError(w, http.StatusBadRequest, "path query parameter is required for raw body upload")
			return
		}
		p := sb.resolve(param)
		if code, err := writeFile(p, r.Body); err != nil {
			jsonError(w, code, "%v", err)
			return
		}
		out = append(out, uploaded{Name: filepath.Base(p), Path: p, Type: "file"})
	case strings.HasPrefix(mt, "multipart/"):
		mr, err := r.MultipartReader()
		if err != nil {
			jsonError(w, http.StatusInternalServerError, "error parsing multipart form: %v", err)
			return
		}
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				jsonError(w, http.StatusInternalServerError, "error reading form: %v", err)
				return
			}
			if part.FormName() != "file" {
				continue
			}
			name := param
			if name == "" {
				name = part.FileName()
			}
			p := sb.resolve(name)
			if code, err := writeFile(p, part); err != nil {
				jsonError(w, code, "%v", err)
				return
			}
			out = append(out, uploaded{Name: filepath.Base(p), Path: p, Type: "file"})
		}
	default:
		jsonError(w, http.StatusBadRequest, "unsupported content type: %s, expected multipart/form-data or application/octet-stream", r.Header.Get("Content-Type"))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// writeFile is envd's processFile: parents made, the file truncated and
// written in place (not atomically).
func writeFile(p string, r io.Reader) (int, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return http.StatusInternalServerError, fmt.Errorf("error ensuring directories: %w", err)
	}
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return http.StatusBadRequest, fmt.Errorf("path is a directory: %s", p)
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return http.StatusInsufficientStorage, fmt.Errorf("not enough inodes available: %w", err)
		}
		return http.StatusInternalServerError, fmt.Errorf("error opening file: %w", err)
	}
	defer f.Close()
	if _, err := f.ReadFrom(r); err != nil {
		if errors.Is(err, syscall.ENOSPC) {
			return http.StatusInsufficientStorage, errors.New("not enough disk space available")
		}
		return http.StatusInternalServerError, fmt.Errorf("error writing file: %w", err)
	}
	return http.StatusOK, nil
}

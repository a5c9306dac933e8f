package daytonatest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// basePath is the PATH of every command the fake runs.
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// env is the environment of every process of a sandbox: a fixed base, the
// sandbox's id and its env. Nothing of the host's.
func (s *Server) env(sb *sandbox) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.envLocked(sb)
}

// envLocked is env; the caller holds s.mu.
func (s *Server) envLocked(sb *sandbox) []string {
	env := []string{"PATH=" + basePath, "HOME=" + sb.dir, "DAYTONA_SANDBOX_ID=" + sb.id, "LANG=C.UTF-8"}
	for k, v := range sb.env {
		env = append(env, k+"="+v)
	}
	return env
}

// command makes a command of the sandbox: its own process group, killed
// as a group when ctx ends.
func (s *Server) command(ctx context.Context, sb *sandbox, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	cmd.Env = s.env(sb)
	cmd.Dir = sb.dir
	return cmd
}

// parseCommand splits a command as the daemon does: on spaces, with ' and
// " grouping words and no escapes; it walks runes, so a byte that is not
// UTF-8 becomes U+FFFD.
func parseCommand(command string) []string {
	var args []string
	var cur strings.Builder
	inQuotes := false
	var quote rune
	for _, r := range command {
		switch {
		case r == '"' || r == '\'':
			if !inQuotes {
				inQuotes, quote = true, r
			} else if quote == r {
				inQuotes, quote = false, 0
			} else {
				cur.WriteRune(r)
			}
		case r == ' ' && !inQuotes:
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteRune(r)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}

// ParseCommand exposes the daemon's split, for tests.
func ParseCommand(command string) []string { return parseCommand(command) }

// execute serves POST /process/execute as current daemons do: sh reads
// the command from its stdin and runs it in its own process group, with
// the request's cwd and envs; the output is combined; past the timeout
// (none when it is 0 or missing), or when the client goes, the group is
// killed, and a timeout answers 408.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req struct {
		Command string            `json:"command"`
		Cwd     *string           `json:"cwd"`
		Envs    map[string]string `json:"envs"`
		Timeout *uint32           `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		toolboxError(w, r, http.StatusBadRequest, errors.New("command is required"))
		return
	}
	if strings.TrimSpace(req.Command) == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("empty command"))
		return
	}
	for k := range req.Envs {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			toolboxError(w, r, http.StatusBadRequest, fmt.Errorf("invalid environment variable name %q", k))
			return
		}
	}
	var timeout time.Duration
	if req.Timeout != nil {
		timeout = time.Duration(*req.Timeout) * time.Second
	}
	ctx, timedOut, cancel := s.runContext(r.Context(), sb, timeout)
	defer cancel()
	cmd := s.command(ctx, sb, "/bin/sh")
	cmd.Stdin = strings.NewReader(req.Command)
	s.finishExecute(w, r, cmd, req.Cwd, req.Envs, timedOut, "command execution timeout")
}

// executeSplit serves POST /process/execute as older daemons do: the
// command is split on spaces with the naive quote rules of parseCommand
// and the words run without a shell; the timeout defaults to 360 s.
func (s *Server) executeSplit(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req struct {
		Command string  `json:"command"`
		Cwd     *string `json:"cwd"`
		Timeout *uint32 `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("command is required"))
		return
	}
	argv := parseCommand(req.Command)
	if len(argv) == 0 {
		toolboxError(w, r, http.StatusBadRequest, errors.New("empty command"))
		return
	}
	timeout := 360 * time.Second
	if req.Timeout != nil && *req.Timeout > 0 {
		timeout = time.Duration(*req.Timeout) * time.Second
	}
	ctx, timedOut, cancel := s.runContext(context.Background(), sb, timeout) // the older daemon goes on when the client leaves
	defer cancel()
	cmd := s.command(ctx, sb, argv[0], argv[1:]...)
	msg := fmt.Sprintf("Command execution timed out after %d seconds. The timeout can be increased by adjusting the timeout parameter in the request.", int(timeout/time.Second))
	s.finishExecute(w, r, cmd, req.Cwd, nil, timedOut, msg)
}

// runContext is the context of a command of process/execute: it ends with
// parent, after timeout (if any; then timedOut reports true), or when the
// sandbox ends.
func (s *Server) runContext(parent context.Context, sb *sandbox, timeout time.Duration) (context.Context, func() bool, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	var mu sync.Mutex
	fired := false
	stopTimer := func() bool { return true }
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() {
			mu.Lock()
			fired = true
			mu.Unlock()
			cancel()
		})
		stopTimer = t.Stop
	}
	go func() {
		select {
		case <-sb.ended:
			cancel()
		case <-ctx.Done():
		}
	}()
	timedOut := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return fired
	}
	return ctx, timedOut, func() { stopTimer(); cancel() }
}

// finishExecute runs cmd with its output combined and answers
// {exitCode, result}, or 408 with msg when timedOut says so.
func (s *Server) finishExecute(w http.ResponseWriter, r *http.Request, cmd *exec.Cmd, cwd *string, envs map[string]string, timedOut func() bool, msg string) {
	switch {
	case cwd == nil:
	case filepath.IsAbs(*cwd):
		cmd.Dir = *cwd
	default: // from the sandbox's working directory, where cmd runs by default
		cmd.Dir = filepath.Join(cmd.Dir, *cwd)
	}
	for k, v := range envs {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"exitCode": -1, "result": err.Error()})
		return
	}
	cmd.Wait()
	if timedOut() {
		toolboxError(w, r, http.StatusRequestTimeout, errors.New(msg))
		return
	}
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	writeJSON(w, http.StatusOK, map[string]any{"exitCode": code, "result": out.String()})
}

// fileInfo is the daemon's FileInfo.
type fileInfo struct {
	Name        string    `json:"name"`
	Path        string    `json:"path,omitempty"`
	Size        int64     `json:"size"`
	Mode        string    `json:"mode"`
	ModTime     string    `json:"modTime"`
	ModifiedAt  time.Time `json:"modifiedAt"`
	IsDir       bool      `json:"isDir"`
	Owner       string    `json:"owner"`
	Group       string    `json:"group"`
	Permissions string    `json:"permissions"`
}

// getFileInfo stats path as the daemon does: os.Stat, following symlinks.
func getFileInfo(path string) (fileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileInfo{}, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fileInfo{
		Name: fi.Name(), Size: fi.Size(), Mode: fi.Mode().String(),
		ModTime: fi.ModTime().String(), ModifiedAt: fi.ModTime(), IsDir: fi.IsDir(),
		Owner: strconv.FormatUint(uint64(st.Uid), 10), Group: strconv.FormatUint(uint64(st.Gid), 10),
		Permissions: fmt.Sprintf("%04o", fi.Mode().Perm()),
	}, nil
}

// fileInfoJSON is what the daemon sends of fi: the older daemon's
// FileInfo has no path and no modifiedAt.
func (s *Server) fileInfoJSON(fi fileInfo) any {
	if !s.opts.OldDaemon {
		return fi
	}
	b, _ := json.Marshal(fi)
	var m map[string]any
	json.Unmarshal(b, &m)
	delete(m, "path")
	delete(m, "modifiedAt")
	return m
}

// statusOf is the daemon's choice of status for a file error.
func statusOf(err error) int {
	switch {
	case os.IsNotExist(err):
		return http.StatusNotFound
	case os.IsPermission(err):
		return http.StatusForbidden
	}
	return http.StatusBadRequest
}

// at is the file path p of a request to sb's toolbox: a relative path is
// taken from the sandbox's working directory (its directory), as the
// daemon's file endpoints take it and the SDK documents ("Relative paths
// are resolved based on the sandbox working directory"), never from the
// test's own working directory.
func (sb *sandbox) at(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(sb.dir, p)
}

func (s *Server) fileInfoHandler(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := r.URL.Query().Get("path")
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("path is required"))
		return
	}
	fi, err := getFileInfo(sb.at(p))
	if err != nil {
		toolboxError(w, r, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, s.fileInfoJSON(fi))
}

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "."
	}
	ents, err := os.ReadDir(sb.at(p))
	if err != nil {
		toolboxError(w, r, statusOf(err), err)
		return
	}
	out := []any{}
	for _, e := range ents {
		fi, err := getFileInfo(sb.at(filepath.Join(p, e.Name())))
		if err != nil {
			continue // the daemon leaves out what it cannot stat (a dangling symlink)
		}
		fi.Path = filepath.Join(p, e.Name())
		out = append(out, s.fileInfoJSON(fi))
	}
	writeJSON(w, http.StatusOK, out)
}

func downloadFile(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := r.URL.Query().Get("path")
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("path is required"))
		return
	}
	abs := sb.at(p)
	fi, err := os.Stat(abs)
	if err != nil {
		toolboxError(w, r, statusOf(err), err)
		return
	}
	if fi.IsDir() {
		toolboxError(w, r, http.StatusBadRequest, errors.New("path must be a file"))
		return
	}
	f, err := os.Open(abs)
	if err != nil {
		toolboxError(w, r, statusOf(err), err)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Description", "File Transfer")
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", "attachment; filename="+filepath.Base(abs))
	w.Header().Set("Content-Transfer-Encoding", "binary")
	http.ServeContent(w, r, "", fi.ModTime(), f) // as gin's c.File: Range requests work
}

// bulkDownload answers a multipart/form-data body: a "file" part per path,
// or an "error" part with {message, statusCode, code}.
func bulkDownload(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req struct {
		Paths []string `json:"paths"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		toolboxError(w, r, http.StatusBadRequest, err)
		return
	}
	mw := multipart.NewWriter(w)
	w.Header().Set("Content-Type", mw.FormDataContentType())
	w.WriteHeader(http.StatusOK)
	for _, p := range req.Paths {
		f, err := os.Open(sb.at(p))
		var fi os.FileInfo
		if err == nil {
			fi, err = f.Stat()
			if err == nil && fi.IsDir() {
				err = errors.New("path is a directory")
			}
		}
		if err != nil {
			if f != nil {
				f.Close()
			}
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="error"; filename=%q`, p))
			h.Set("Content-Type", "application/json")
			pw, _ := mw.CreatePart(h)
			json.NewEncoder(pw).Encode(map[string]any{"message": err.Error(), "statusCode": statusOf(err), "code": "FILE_NOT_FOUND"})
			continue
		}
		pw, _ := mw.CreateFormFile("file", p)
		io.Copy(pw, f)
		f.Close()
	}
	mw.Close()
}

// uploadFile serves /files/upload of older daemons: one part "file" saved
// to path, its directory made first (0750), as gin's SaveUploadedFile
// does.
func uploadFile(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := sb.at(r.URL.Query().Get("path"))
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("path is required"))
		return
	}
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		toolboxError(w, r, http.StatusBadRequest, err)
		return
	}
	defer r.MultipartForm.RemoveAll()
	fhs := r.MultipartForm.File["file"]
	if len(fhs) == 0 {
		toolboxError(w, r, http.StatusBadRequest, errors.New("http: no such file"))
		return
	}
	src, err := fhs[0].Open()
	if err != nil {
		toolboxError(w, r, http.StatusBadRequest, err)
		return
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
		toolboxError(w, r, http.StatusBadRequest, err)
		return
	}
	out, err := os.Create(p)
	if err != nil {
		toolboxError(w, r, http.StatusBadRequest, err)
		return
	}
	_, err = io.Copy(out, src)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		toolboxError(w, r, http.StatusBadRequest, err)
		return
	}
	w.WriteHeader(http.StatusOK)
}

// bulkUpload serves /files/bulk-upload as the daemon does: parts
// files[i].path (trimmed) then files[i].file; each file is written to a
// temporary name in its directory (made, 0755, when missing), given mode
// 0644 and renamed over the path (through a final symlink). It answers
// {"files": [{path, bytes}]}, or 400 {"errors": [...], "files": [...]}
// with what did land.
func bulkUpload(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	mr, err := r.MultipartReader()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []string{"invalid multipart form"}})
		return
	}
	type landed struct {
		Path  string `json:"path"`
		Bytes int64  `json:"bytes"`
	}
	dests := map[string]string{}
	errs := []string{}
	files := []landed{}
	index := func(name string) string {
		s := strings.TrimPrefix(name, "files[")
		return strings.TrimSuffix(strings.TrimSuffix(s, "].path"), "].file")
	}
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			errs = append(errs, fmt.Sprintf("reading part: %v", err))
			break
		}
		name := part.FormName()
		switch {
		case strings.HasSuffix(name, ".path"):
			b, _ := io.ReadAll(part)
			if dest := strings.TrimSpace(string(b)); dest != "" {
				dests[index(name)] = dest
			} else {
				errs = append(errs, fmt.Sprintf("path[%s]: empty path", index(name)))
			}
		case strings.HasSuffix(name, ".file"):
			dest, ok := dests[index(name)]
			if !ok {
				errs = append(errs, fmt.Sprintf("file[%s]: missing .path metadata", index(name)))
				continue
			}
			n, err := writeUpload(part, sb.at(dest))
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", dest, err))
				continue
			}
			files = append(files, landed{dest, n})
		}
	}
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": errs, "files": files})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"files": files})
}

// writeUpload writes r to dest through a temporary file in its directory.
func writeUpload(r io.Reader, dest string) (int64, error) {
	dir := filepath.Dir(dest)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("mkdir %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".daytona-upload-*")
	if err != nil {
		return 0, fmt.Errorf("create temp: %w", err)
	}
	n, err := io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp.Name())
		return 0, fmt.Errorf("write: %w", err)
	}
	if target, err := filepath.EvalSymlinks(dest); err == nil {
		dest = target
	}
	os.Chmod(tmp.Name(), 0o644)
	if err := os.Rename(tmp.Name(), dest); err != nil {
		os.Remove(tmp.Name())
		return 0, fmt.Errorf("rename: %w", err)
	}
	return n, nil
}

// createFolder is MkdirAll with the mode given in octal (default 0755).
func createFolder(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := sb.at(r.URL.Query().Get("path"))
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("path is required"))
		return
	}
	perm := os.FileMode(0o755)
	if m := r.URL.Query().Get("mode"); m != "" {
		n, err := strconv.ParseUint(m, 8, 32)
		if err != nil {
			toolboxError(w, r, http.StatusBadRequest, errors.New("invalid mode format"))
			return
		}
		perm = os.FileMode(n)
	}
	if err := os.MkdirAll(p, perm); err != nil {
		toolboxError(w, r, http.StatusBadRequest, err)
		return
	}
	w.WriteHeader(http.StatusCreated)
}

// deleteFile stats path (following symlinks), refuses a directory without
// recursive=true, then removes it.
func deleteFile(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	p := sb.at(r.URL.Query().Get("path"))
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("path is required"))
		return
	}
	recursive := r.URL.Query().Get("recursive") == "true"
	fi, err := os.Stat(p)
	if err != nil {
		toolboxError(w, r, statusOf(err), err)
		return
	}
	if fi.IsDir() && !recursive {
		toolboxError(w, r, http.StatusBadRequest, errors.New("cannot delete directory without recursive flag"))
		return
	}
	if recursive {
		err = os.RemoveAll(p)
	} else {
		err = os.Remove(p)
	}
	if err != nil {
		toolboxError(w, r, http.StatusBadRequest, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// moveFile refuses an existing destination; a failed rename falls back to
// copy and delete, as the daemon's does.
func moveFile(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	src, dst := r.URL.Query().Get("source"), r.URL.Query().Get("destination")
	if src == "" || dst == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("source and destination paths are required"))
		return
	}
	src, dst = sb.at(src), sb.at(dst)
	sfi, err := os.Stat(src)
	if err != nil {
		toolboxError(w, r, statusOf(err), err)
		return
	}
	if _, err := os.Stat(filepath.Dir(dst)); err != nil {
		toolboxError(w, r, statusOf(err), err)
		return
	}
	if _, err := os.Stat(dst); err == nil {
		toolboxError(w, r, http.StatusConflict, errors.New("destination already exists"))
		return
	}
	if err := os.Rename(src, dst); err != nil {
		if err := copyTree(src, dst, sfi); err != nil {
			toolboxError(w, r, http.StatusBadRequest, fmt.Errorf("failed to move file: %w", err))
			return
		}
		if err := os.RemoveAll(src); err != nil {
			writeJSON(w, http.StatusOK, map[string]string{"message": "file copied successfully but source could not be deleted", "error": err.Error()})
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

func copyTree(src, dst string, fi os.FileInfo) error {
	if !fi.IsDir() {
		return copyFile(src, dst, fi.Mode())
	}
	return filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		t := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(t, info.Mode())
		}
		return copyFile(p, t, info.Mode())
	})
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// setPermissions is os.Chmod with the octal mode given (so only the
// permission bits take: os.FileMode's setuid is not bit 04000), then
// os.Chown.
func setPermissions(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("path is required"))
		return
	}
	abs := sb.at(p)
	if _, err := os.Stat(abs); err != nil {
		toolboxError(w, r, statusOf(err), err)
		return
	}
	if m := q.Get("mode"); m != "" {
		n, err := strconv.ParseUint(m, 8, 32)
		if err != nil {
			toolboxError(w, r, http.StatusBadRequest, errors.New("invalid mode format"))
			return
		}
		if err := os.Chmod(abs, os.FileMode(n)); err != nil {
			toolboxError(w, r, http.StatusBadRequest, fmt.Errorf("failed to change mode: %w", err))
			return
		}
	}
	if o, g := q.Get("owner"), q.Get("group"); o != "" || g != "" {
		uid, gid := -1, -1
		var err error
		if o != "" {
			if uid, err = strconv.Atoi(o); err != nil {
				toolboxError(w, r, http.StatusBadRequest, errors.New("user not found"))
				return
			}
		}
		if g != "" {
			if gid, err = strconv.Atoi(g); err != nil {
				toolboxError(w, r, http.StatusBadRequest, errors.New("group not found"))
				return
			}
		}
		if err := os.Chown(abs, uid, gid); err != nil {
			toolboxError(w, r, http.StatusBadRequest, fmt.Errorf("failed to change ownership: %w", err))
			return
		}
	}
	w.WriteHeader(http.StatusOK)
}

// workDir serves work-dir and user-home-dir: the sandbox's directory.
func workDir(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	writeJSON(w, http.StatusOK, map[string]string{"dir": sb.dir})
}

func version(w http.ResponseWriter, r *http.Request, _ *sandbox) {
	writeJSON(w, http.StatusOK, map[string]string{"version": "daytonatest"})
}

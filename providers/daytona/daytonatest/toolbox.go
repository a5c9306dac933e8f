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
	"syscall"
	"time"
)

// basePath is the PATH of every command the fake runs.
const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// serveToolbox routes /toolbox/{id}/... to the sandbox's daemon.
func (s *Server) serveToolbox(w http.ResponseWriter, r *http.Request, id, p string) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	if sb == nil || sb.gone() {
		s.mu.Unlock()
		writeJSON(w, http.StatusNotFound, nestError(http.StatusNotFound, "Sandbox not found"))
		return
	}
	if sb.state != "started" {
		st := sb.state
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "Sandbox is not started (state "+st+")"))
		return
	}
	sb.lastActivity = time.Now()
	s.mu.Unlock()

	switch {
	case p == "/process/execute" && r.Method == http.MethodPost:
		s.execute(w, r, sb)
	case strings.HasPrefix(p, "/process/session"):
		s.serveSession(w, r, sb, strings.Trim(strings.TrimPrefix(p, "/process/session"), "/"))
	case p == "/files" && r.Method == http.MethodGet:
		listFiles(w, r)
	case p == "/files" && r.Method == http.MethodDelete:
		deleteFile(w, r)
	case p == "/files/info" && r.Method == http.MethodGet:
		fileInfoHandler(w, r)
	case p == "/files/download" && r.Method == http.MethodGet:
		downloadFile(w, r)
	case p == "/files/bulk-download" && r.Method == http.MethodPost:
		bulkDownload(w, r)
	case (p == "/files/upload" || p == "/files/upload-v2") && r.Method == http.MethodPost:
		uploadFile(w, r)
	case p == "/files/bulk-upload" && r.Method == http.MethodPost:
		bulkUpload(w, r)
	case p == "/files/folder" && r.Method == http.MethodPost:
		createFolder(w, r)
	case p == "/files/move" && r.Method == http.MethodPost:
		moveFile(w, r)
	case p == "/files/permissions" && r.Method == http.MethodPost:
		setPermissions(w, r)
	case p == "/work-dir" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]string{"dir": sb.dir})
	case p == "/user-home-dir" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]string{"dir": sb.dir})
	case p == "/version" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, map[string]string{"version": "daytonatest"})
	default:
		toolboxError(w, r, http.StatusNotFound, fmt.Errorf("no route %s %s", r.Method, p))
	}
}

// env is the environment of every process of a sandbox: a fixed base, the
// sandbox's id and its env. Nothing of the host's.
func (s *Server) env(sb *sandbox) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
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

// execute serves POST /process/execute: the naive split, no shell, output
// combined, 408 when the timeout passes.
func (s *Server) execute(w http.ResponseWriter, r *http.Request, sb *sandbox) {
	var req struct {
		Command string            `json:"command"`
		Cwd     *string           `json:"cwd"`
		Envs    map[string]string `json:"envs"`
		Timeout *uint32           `json:"timeout"`
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
	ctx := context.Background() // the daemon goes on when the client leaves
	if req.Timeout != nil && *req.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*req.Timeout)*time.Second)
		defer cancel()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-sb.ended:
			cancel()
		case <-ctx.Done():
		}
	}()
	cmd := s.command(ctx, sb, argv[0], argv[1:]...)
	if req.Cwd != nil {
		cmd.Dir = *req.Cwd
	}
	for k, v := range req.Envs {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"exitCode": -1, "result": err.Error()})
		return
	}
	err := cmd.Wait()
	if ctx.Err() == context.DeadlineExceeded {
		toolboxError(w, r, http.StatusRequestTimeout, fmt.Errorf("Command execution timed out after %d seconds. The timeout can be increased by adjusting the timeout parameter in the request.", *req.Timeout))
		return
	}
	_ = err
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

func fileInfoHandler(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("path is required"))
		return
	}
	fi, err := getFileInfo(p)
	if err != nil {
		toolboxError(w, r, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, fi)
}

func listFiles(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		p = "."
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		toolboxError(w, r, statusOf(err), err)
		return
	}
	out := []fileInfo{}
	for _, e := range ents {
		fi, err := getFileInfo(filepath.Join(p, e.Name()))
		if err != nil {
			continue // the daemon leaves out what it cannot stat (a dangling symlink)
		}
		fi.Path = filepath.Join(p, e.Name())
		out = append(out, fi)
	}
	writeJSON(w, http.StatusOK, out)
}

func downloadFile(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("path is required"))
		return
	}
	abs, _ := filepath.Abs(p)
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
func bulkDownload(w http.ResponseWriter, r *http.Request) {
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
		f, err := os.Open(p)
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

// uploadFile serves /files/upload: one part "file" saved to path, its
// directory made first (0750), as gin's SaveUploadedFile does.
func uploadFile(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
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

// bulkUpload serves /files/bulk-upload: parts files[i].path then
// files[i].file.
func bulkUpload(w http.ResponseWriter, r *http.Request) {
	mr, err := r.MultipartReader()
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": []string{"invalid multipart form"}})
		return
	}
	dests := map[string]string{}
	var errs []string
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
			dests[index(name)] = string(b)
		case strings.HasSuffix(name, ".file"):
			dest, ok := dests[index(name)]
			if !ok {
				errs = append(errs, fmt.Sprintf("file[%s]: missing .path metadata", index(name)))
				continue
			}
			if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
				errs = append(errs, fmt.Sprintf("%s: mkdir: %v", dest, err))
				continue
			}
			f, err := os.Create(dest)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: create: %v", dest, err))
				continue
			}
			if _, err := io.Copy(f, part); err != nil {
				errs = append(errs, fmt.Sprintf("%s: write: %v", dest, err))
			}
			f.Close()
		}
	}
	if len(errs) > 0 {
		writeJSON(w, http.StatusBadRequest, map[string]any{"errors": errs})
		return
	}
	w.WriteHeader(http.StatusOK)
}

// createFolder is MkdirAll with the mode given in octal (default 0755).
func createFolder(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
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
func deleteFile(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Query().Get("path")
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
func moveFile(w http.ResponseWriter, r *http.Request) {
	src, dst := r.URL.Query().Get("source"), r.URL.Query().Get("destination")
	if src == "" || dst == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("source and destination paths are required"))
		return
	}
	src, _ = filepath.Abs(src)
	dst, _ = filepath.Abs(dst)
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
func setPermissions(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := q.Get("path")
	if p == "" {
		toolboxError(w, r, http.StatusBadRequest, errors.New("path is required"))
		return
	}
	abs, _ := filepath.Abs(p)
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

package daytonatest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// baseSnapshot is the snapshot a sandbox is made from when its create
// names none.
const baseSnapshot = "daytonaio/sandbox:daytonatest"

// stateSnapshotting is a sandbox's state while a snapshot is taken.
const stateSnapshotting = "snapshotting"

// createSandboxSnapshot serves POST /sandbox/{id}/snapshot
// (CreateSandboxSnapshot: name, includeMemory): the sandbox's directory is
// copied as the snapshot, and the sandbox is snapshotting for
// Options.SnapshottingFor, then started again. A name taken is 409; a
// sandbox that is not started is 400, one whose state is changing 409.
func (s *Server) createSandboxSnapshot(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name          string `json:"name"`
		IncludeMemory bool   `json:"includeMemory"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Name == "" {
		writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "name must be a non-empty string"))
		return
	}
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	switch {
	case sb.pending():
		s.mu.Unlock()
		inProgress(w)
		return
	case sb.state != stateStarted:
		st := sb.state
		s.mu.Unlock()
		writeJSON(w, http.StatusBadRequest, nestError(http.StatusBadRequest, "Sandbox is in state "+st+" and cannot be snapshotted"))
		return
	case s.snapshots[body.Name] != "":
		s.mu.Unlock()
		writeJSON(w, http.StatusConflict, nestError(http.StatusConflict, fmt.Sprintf("Snapshot with name %s already exists", body.Name)))
		return
	}
	now := time.Now()
	sb.state, sb.updatedAt, sb.settleAt = stateSnapshotting, now, now.Add(s.opts.SnapshottingFor)
	dir, src := filepath.Join(s.root, "snapshot-"+newID()), sb.dir
	s.snapshots[body.Name] = dir
	out := s.dto(sb, false)
	s.mu.Unlock()
	if err := copyDir(src, dir); err != nil {
		writeJSON(w, http.StatusInternalServerError, nestError(http.StatusInternalServerError, err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// checkSnapshot is a create's check of the snapshot it names: the base
// one, or one taken; "" when it is known.
func (s *Server) checkSnapshot(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == "" || name == baseSnapshot || s.snapshots[name] != "" {
		return ""
	}
	return fmt.Sprintf("Snapshot %s not found. Did you add it through the Daytona Dashboard?", name)
}

// fromSnapshot fills a new sandbox's directory from the snapshot it was
// made from, if it was made from one taken.
func (s *Server) fromSnapshot(name, dir string) error {
	s.mu.Lock()
	src := s.snapshots[name]
	s.mu.Unlock()
	if src == "" {
		return nil
	}
	return copyDir(src, dir)
}

// copyDir copies the directory src, as it is while the sandbox runs, into
// dst: directories and files (a file that goes meanwhile is left out), not
// the fake's own session directories.
func copyDir(src, dst string) error {
	return filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return nil
		case err != nil:
			return err
		case fi.IsDir() && strings.HasPrefix(fi.Name(), ".daytona-session-"):
			return filepath.SkipDir
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		t := filepath.Join(dst, rel)
		if fi.IsDir() {
			return os.MkdirAll(t, fi.Mode().Perm()|0o700)
		}
		if err := copyFile(p, t, fi.Mode().Perm()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	})
}

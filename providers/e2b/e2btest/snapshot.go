package e2btest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
)

// team is the team slug snapshot names are namespaced under, as E2B
// namespaces them ("team-slug/name:tag").
const team = "e2btest"

// snapshotName is what a snapshot template's name may be.
var snapshotName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,127}$`)

// snapshot is a snapshot template: the size of the sandbox it was taken of
// and a copy of its home.
type snapshot struct {
	tpl  Template
	home string
}

// snapshot answers POST /sandboxes/{id}/snapshots (SandboxSnapshotRequest:
// name, optional): the sandbox is paused while its home is copied, then
// runs on; 201 SnapshotInfo {snapshotID, names}. The id (team/name:default,
// or the template id :default without a name) is a template a create takes.
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Name string `json:"name"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		jsonError(w, http.StatusBadRequest, "request body has an error: %v", err)
		return
	}
	if body.Name != "" && !snapshotName.MatchString(body.Name) {
		jsonError(w, http.StatusBadRequest, "invalid snapshot name %q", body.Name)
		return
	}
	sb := s.get(r.PathValue("id"))
	if sb == nil || !sb.running() {
		jsonError(w, http.StatusNotFound, "sandbox \"%s\" not found", r.PathValue("id"))
		return
	}
	id := team + "/" + body.Name + ":default"
	if body.Name == "" {
		id = newID(20) + ":default"
	}
	dir := filepath.Join(s.root, "snapshots", newID(12))
	signalTagged("E2B_SANDBOX_ID="+sb.id, syscall.SIGSTOP)
	err := copyDir(sb.home, dir)
	signalTagged("E2B_SANDBOX_ID="+sb.id, syscall.SIGCONT)
	if err != nil {
		jsonError(w, http.StatusInternalServerError, "snapshotting the sandbox: %v", err)
		return
	}
	s.mu.Lock()
	s.snapshots[id] = snapshot{tpl: sb.tpl, home: dir}
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, map[string]any{"snapshotID": id, "names": []string{id}})
}

// deleteTemplate answers DELETE /templates/{templateID} for a snapshot:
// 204, or 404.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("templateID")
	s.mu.Lock()
	snap, ok := s.snapshots[id]
	delete(s.snapshots, id)
	s.mu.Unlock()
	if !ok {
		jsonError(w, http.StatusNotFound, "template '%s' not found", id)
		return
	}
	os.RemoveAll(snap.home)
	w.WriteHeader(http.StatusNoContent)
}

// template returns the template id names: one of Options.Templates, or a
// snapshot (then with the directory its home starts from).
func (s *Server) template(id string) (Template, string, bool) {
	if tpl, ok := s.opts.Templates[id]; ok {
		return tpl, "", true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, ok := s.snapshots[id]
	return snap.tpl, snap.home, ok
}

// copyDir copies the tree of src into dst with cp -a (modes, times and
// links kept), as a snapshot of a sandbox's disk keeps them.
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-a", src+"/.", dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

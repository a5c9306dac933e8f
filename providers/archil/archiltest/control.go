package archiltest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

var (
	diskNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
	diskIDRE   = regexp.MustCompile(`^dsk-[0-9a-f]{16}$`)
)

// diskResponse is the DiskResponse schema.
type diskResponse struct {
	ID              string          `json:"id"`
	Name            string          `json:"name"`
	Organization    string          `json:"organization"`
	Status          string          `json:"status"`
	FSHandlerStatus string          `json:"fsHandlerStatus,omitempty"`
	Provider        string          `json:"provider"`
	Region          string          `json:"region"`
	CreatedAt       string          `json:"createdAt"`
	LastAccessed    string          `json:"lastAccessed,omitempty"`
	DataSize        int64           `json:"dataSize"`
	Mounts          json.RawMessage `json:"mounts,omitempty"`
	AllowedIPs      []string        `json:"allowedIps"`
}

// authorizedUser is the AuthorizedUser schema.
type authorizedUser struct {
	Type        string `json:"type"`
	Nickname    string `json:"nickname,omitempty"`
	TokenSuffix string `json:"tokenSuffix,omitempty"`
	Token       string `json:"token,omitempty"`
	Identifier  string `json:"identifier,omitempty"`
	CreatedAt   string `json:"createdAt,omitempty"`
}

func (s *Server) control(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/api/")
	parts := strings.Split(rest, "/")
	switch {
	case rest == "disks" && r.Method == http.MethodGet:
		s.listDisks(w, r)
	case rest == "disks" && r.Method == http.MethodPost:
		s.createDisk(w, r)
	case len(parts) == 2 && parts[0] == "disks" && r.Method == http.MethodGet:
		s.getDisk(w, parts[1])
	case len(parts) == 2 && parts[0] == "disks" && r.Method == http.MethodDelete:
		s.deleteDisk(w, parts[1])
	case len(parts) == 3 && parts[0] == "disks" && parts[2] == "exec" && r.Method == http.MethodPost:
		s.exec(w, r, parts[1])
	default:
		envelopeError(w, http.StatusNotFound, "Not found")
	}
}

func (s *Server) response(d *disk) diskResponse {
	st := "available"
	if d.reads < s.opts.CreatingPolls {
		st = "creating"
	}
	return diskResponse{
		ID: d.ID, Name: d.Name, Organization: "org-archiltest", Status: st, Provider: "aws",
		Region: s.opts.Region, CreatedAt: d.Created.UTC().Format(time.RFC3339Nano),
		Mounts: d.Mounts, AllowedIPs: append([]string{}, d.AllowedIP...),
	}
}

func (s *Server) listDisks(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	s.mu.Lock()
	out := []diskResponse{}
	for _, d := range s.disks {
		if name == "" || d.Name == name {
			d.reads++
			out = append(out, s.response(d))
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b diskResponse) int { return strings.Compare(a.ID, b.ID) })
	envelope(w, http.StatusOK, out)
}

func (s *Server) createDisk(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name       string          `json:"name"`
		Mounts     json.RawMessage `json:"mounts"`
		AllowedIPs []string        `json:"allowedIps"`
	}
	if err := readJSON(r, &req); err != nil {
		envelopeError(w, http.StatusBadRequest, "Invalid request body")
		return
	}
	if !diskNameRE.MatchString(req.Name) {
		envelopeError(w, http.StatusBadRequest, "Disk name must be alphanumeric, dashes or underscores")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.disks {
		if d.Name != req.Name {
			continue
		}
		if bytes.Equal(bytes.TrimSpace(d.Mounts), bytes.TrimSpace(req.Mounts)) && slices.Equal(d.AllowedIP, req.AllowedIPs) {
			envelope(w, http.StatusOK, map[string]any{"diskId": d.ID, "authorizedUsers": []authorizedUser{{Type: "token", Nickname: "default", TokenSuffix: d.token[len(d.token)-4:], Identifier: "tok-" + d.ID}}})
			return
		}
		envelopeError(w, http.StatusConflict, "A disk with this name already exists with a different configuration")
		return
	}
	id := "dsk-" + randHex(8)
	dir := filepath.Join(s.state, "disks", id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		envelopeError(w, http.StatusInternalServerError, "Internal error")
		return
	}
	d := &disk{ID: id, Name: req.Name, Dir: dir, Created: time.Now(), Mounts: req.Mounts, AllowedIP: req.AllowedIPs, token: randHex(16)}
	s.disks[id] = d
	user := authorizedUser{Type: "token", Nickname: "default", TokenSuffix: d.token[len(d.token)-4:], Token: d.token, Identifier: "tok-" + id, CreatedAt: d.Created.UTC().Format(time.RFC3339)}
	envelope(w, http.StatusCreated, map[string]any{"diskId": id, "authorizedUsers": []authorizedUser{user}})
}

// lookup finds a disk by id, answering 400 or 404 itself when it cannot.
func (s *Server) lookup(w http.ResponseWriter, id string) *disk {
	if !diskIDRE.MatchString(id) {
		envelopeError(w, http.StatusBadRequest, "Invalid disk ID")
		return nil
	}
	s.mu.Lock()
	d := s.disks[id]
	s.mu.Unlock()
	if d == nil {
		envelopeError(w, http.StatusNotFound, "Disk not found")
	}
	return d
}

func (s *Server) getDisk(w http.ResponseWriter, id string) {
	d := s.lookup(w, id)
	if d == nil {
		return
	}
	s.mu.Lock()
	d.reads++
	resp := s.response(d)
	s.mu.Unlock()
	envelope(w, http.StatusOK, resp)
}

func (s *Server) deleteDisk(w http.ResponseWriter, id string) {
	d := s.lookup(w, id)
	if d == nil {
		return
	}
	s.mu.Lock()
	delete(s.disks, id)
	var runs []*run
	for _, r := range s.running {
		if r.disk == id {
			runs = append(runs, r)
		}
	}
	s.mu.Unlock()
	for _, r := range runs {
		r.kill()
	}
	os.RemoveAll(d.Dir)
	envelope(w, http.StatusOK, nil)
}

package daytonatest

import (
	"fmt"
	"mime"
	"net/url"
	"strings"

	"github.com/boxfs/boxfs/providers/daytona/daytonatest/spec"
)

// CheckRoutes returns an error for every route the fake serves that sp
// does not have: the fake must not serve what the vendor dropped.
func (s *Server) CheckRoutes(sp *spec.Spec) []error {
	var errs []error
	for _, r := range s.Routes() {
		if !sp.HasRoute(r.Plane, r.Method, r.Path) {
			errs = append(errs, fmt.Errorf("the fake serves %s %s %s, which the spec does not have", r.Plane, r.Method, r.Path))
		}
	}
	return errs
}

// CheckRequests returns an error for every recorded request that calls a
// route, or sends a query parameter or a field, that sp does not have,
// and for every successful JSON answer of the fake holding a field or a
// value sp does not have.
func (s *Server) CheckRequests(sp *spec.Spec) []error {
	var errs []error
	for i, r := range s.Requests() {
		plane, path, ok := s.plane(r.Path)
		if !ok {
			errs = append(errs, fmt.Errorf("request %d: %s %s is under neither /api nor /toolbox", i, r.Method, r.Path))
			continue
		}
		q, err := url.ParseQuery(r.Query)
		if err != nil {
			errs = append(errs, fmt.Errorf("request %d: %s %s: query: %v", i, r.Method, r.Path, err))
			continue
		}
		req := spec.Request{Plane: plane, Method: r.Method, Path: path, Query: q, ContentType: r.Header.Get("Content-Type"), Body: r.Body}
		if err := sp.CheckRequest(req); err != nil {
			errs = append(errs, fmt.Errorf("request %d: %w", i, err))
			continue
		}
		if mt, _, _ := mime.ParseMediaType(r.ContentType); r.Status/100 == 2 && mt == "application/json" {
			if err := sp.CheckResponse(plane, r.Method, path, r.Response); err != nil {
				errs = append(errs, fmt.Errorf("the fake's answer to request %d: %w", i, err))
			}
		}
	}
	return errs
}

// plane maps a path the fake served to the spec's plane and the path
// within it.
func (s *Server) plane(p string) (plane, path string, ok bool) {
	if rest, ok := strings.CutPrefix(p, "/api/"); ok {
		return "api", "/" + rest, true
	}
	if rest, ok := strings.CutPrefix(p, "/toolbox/"); ok {
		_, sub, found := strings.Cut(rest, "/")
		plane := "toolbox"
		if s.opts.OldDaemon {
			plane = "toolbox-old"
		}
		return plane, "/" + sub, found
	}
	return "", "", false
}

// SpecErrors checks the fake and the requests it recorded against the
// vendor's spec as pinned (spec.Load): CheckRoutes and CheckRequests.
func (s *Server) SpecErrors() []error {
	sp, err := spec.Load()
	if err != nil {
		return []error{err}
	}
	return append(s.CheckRoutes(sp), s.CheckRequests(sp)...)
}

package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Request is one call to check.
type Request struct {
	Plane       string
	Method      string
	Path        string // concrete, relative to the plane's base
	Query       url.Values
	ContentType string
	Body        []byte
}

// CheckRequest reports what of req the spec does not have: its route, a
// query parameter, a multipart field, or a field of its JSON body.
func (s *Spec) CheckRequest(req Request) error {
	r, ok := s.Match(req.Plane, req.Method, req.Path)
	if !ok {
		return fmt.Errorf("%s %s %s: no such route in the spec", req.Plane, req.Method, req.Path)
	}
	var errs []error
	for k := range req.Query {
		if !slices.Contains(r.Query, k) {
			errs = append(errs, fmt.Errorf("query parameter %q", k))
		}
	}
	mt, params, _ := mime.ParseMediaType(req.ContentType)
	switch {
	case len(bytes.TrimSpace(req.Body)) == 0:
	case mt == "multipart/form-data":
		errs = append(errs, s.checkForm(r, params["boundary"], req.Body)...)
	case r.Body != "":
		var v any
		if err := json.Unmarshal(req.Body, &v); err != nil {
			errs = append(errs, fmt.Errorf("body is not JSON: %v", err))
		} else if err := s.CheckValue(r.Plane, r.Body, v); err != nil {
			errs = append(errs, fmt.Errorf("body: %w", err))
		}
	default:
		errs = append(errs, fmt.Errorf("a body (%s) where the spec has none", mt))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s %s (%s): %w", r.Method, r.Path, r.Op, errors.Join(errs...))
	}
	return nil
}

// index matches the index in a multipart field name: files[3].path.
var index = regexp.MustCompile(`\[[0-9]+\]`)

func (s *Spec) checkForm(r Route, boundary string, body []byte) []error {
	if len(r.Form) == 0 {
		return []error{errors.New("a multipart body where the spec has none")}
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var errs []error
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			return errs
		}
		if err != nil {
			return append(errs, fmt.Errorf("multipart body: %v", err))
		}
		name := index.ReplaceAllString(p.FormName(), "[{i}]")
		if !slices.Contains(r.Form, name) {
			errs = append(errs, fmt.Errorf("multipart field %q", p.FormName()))
		}
	}
}

// CheckResponse reports what of a successful JSON answer to a call of
// plane's method on path the spec's answer type does not have. An answer
// to a route whose type the spec leaves out (void) is not checked.
func (s *Spec) CheckResponse(plane, method, path string, body []byte) error {
	r, ok := s.Match(plane, method, path)
	if !ok {
		return fmt.Errorf("%s %s %s: no such route in the spec", plane, method, path)
	}
	if len(bytes.TrimSpace(body)) == 0 || r.Resp == "" || r.Resp == "void" {
		return nil // the spec does not describe the body (the daemon may still send one)
	}
	var v any
	if err := json.Unmarshal(body, &v); err != nil {
		if r.Resp == "string" || r.Resp == "any" {
			return nil
		}
		return fmt.Errorf("%s %s (%s): the answer is not JSON: %v", r.Method, r.Path, r.Op, err)
	}
	if err := s.CheckValue(r.Plane, r.Resp, v); err != nil {
		return fmt.Errorf("%s %s (%s): answer: %w", r.Method, r.Path, r.Op, err)
	}
	return nil
}

// CheckValue checks a decoded JSON value against a type of plane: every
// field of an object must be one of its model's, every enum value one of
// the enum's, and scalars of their type.
func (s *Spec) CheckValue(plane, typ string, v any) error {
	if v == nil {
		return nil
	}
	switch {
	case typ == "any":
		return nil
	case typ == "map":
		if _, ok := v.(map[string]any); !ok {
			return fmt.Errorf("%s where an object is", jsonKind(v))
		}
		return nil
	case strings.HasPrefix(typ, "[]"):
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s where an array is", jsonKind(v))
		}
		for i, e := range arr {
			if err := s.CheckValue(plane, typ[2:], e); err != nil {
				return fmt.Errorf("[%d]: %w", i, err)
			}
		}
		return nil
	case typ == "string" || typ == "number" || typ == "boolean":
		if k := jsonKind(v); k != typ {
			return fmt.Errorf("%s where a %s is", k, typ)
		}
		return nil
	}
	if vals, ok := s.Enums[plane][typ]; ok {
		str, isStr := v.(string)
		if !isStr || !slices.Contains(vals, str) {
			return fmt.Errorf("%v is not a value of %s", v, typ)
		}
		return nil
	}
	fields, ok := s.Models[plane][typ]
	if !ok {
		return fmt.Errorf("type %s is not in the spec", typ)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("%s where a %s is", jsonKind(v), typ)
	}
	var errs []error
	for _, k := range sortedKeys(obj) {
		i := slices.IndexFunc(fields, func(f Field) bool { return f.Name == k })
		if i < 0 {
			errs = append(errs, fmt.Errorf("field %q is not in %s", k, typ))
			continue
		}
		if err := s.CheckValue(plane, fields[i].Type, obj[k]); err != nil {
			errs = append(errs, fmt.Errorf("%s.%s: %w", typ, k, err))
		}
	}
	return errors.Join(errs...)
}

func jsonKind(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return "null"
}

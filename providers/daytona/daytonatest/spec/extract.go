package spec

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// apiFiles are the generated API files each plane's routes are read from:
// the sandbox API of the control plane; the process, file-system and info
// APIs of the toolbox (the others, such as git, LSP and computer use, are
// not for boxfs).
var apiFiles = map[string][]string{
	API:        {"sandbox-api"},
	Toolbox:    {"process-api", "file-system-api", "info-api"},
	ToolboxOld: {"process-api", "file-system-api", "info-api"},
}

// Files reads the text files of an npm pack (a gzipped tar), by their
// path inside the package ("src/api/sandbox-api.js").
func Files(tgz io.Reader) (map[string]string, error) {
	zr, err := gzip.NewReader(tgz)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	out := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg || h.Size > 8<<20 {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		_, name, _ := strings.Cut(h.Name, "/") // packs hold package/...
		out[name] = string(b)
	}
}

// Extract builds the table from the packs' files (by plane). It fails when
// a pack no longer has the shape it reads, rather than leaving routes out.
func Extract(packs []Pack, files map[string]map[string]string) (*Spec, []string, error) {
	s := &Spec{Packs: packs, Models: map[string]map[string][]Field{}, Enums: map[string]map[string][]string{}}
	var warnings []string
	for _, p := range packs {
		if p.Plane == SDK {
			continue
		}
		fs := files[p.Plane]
		names, ok := apiFiles[p.Plane]
		if !ok {
			return nil, nil, fmt.Errorf("pack %s: unknown plane %q", p.Name, p.Plane)
		}
		for _, n := range names {
			routes, err := apiRoutes(p.Plane, fs["src/api/"+n+".js"], fs["src/api/"+n+".d.ts"])
			if err != nil {
				return nil, nil, fmt.Errorf("%s %s: %v", p.Name, n, err)
			}
			s.Routes = append(s.Routes, routes...)
		}
		w := s.addModels(p.Plane, fs)
		warnings = append(warnings, w...)
	}
	form, err := sdkBulkUploadForm(files[SDK]["esm/FileSystem.js"])
	if err != nil {
		return nil, nil, fmt.Errorf("sdk: %v", err)
	}
	for i, r := range s.Routes {
		if r.Op == "uploadFiles" && len(r.Form) == 0 {
			s.Routes[i].Form = form
		}
	}
	return s, warnings, nil
}

var (
	opStart    = regexp.MustCompile(`(?m)^        (\w+): async \(([^)]*)\) => \{$`)
	pathRe     = regexp.MustCompile("const localVarPath = `([^`]*)`")
	methodRe   = regexp.MustCompile(`method: '([A-Z]+)'`)
	queryRe    = regexp.MustCompile(`localVarQueryParameter\['([^']+)'\]`)
	headerRe   = regexp.MustCompile(`localVarHeaderParameter\['([^']+)'\] = String\(`)
	formRe     = regexp.MustCompile(`localVarFormParams\.append\('([^']+)'`)
	bodyRe     = regexp.MustCompile(`serializeDataIfNeeded\)\((\w+),`)
	paramSig   = regexp.MustCompile(`(?m)^    (\w+): \((.*)\) => Promise<RequestArgs>;$`)
	respSig    = regexp.MustCompile(`(?m)^    (\w+)\(.*\): Promise<\(axios\?: AxiosInstance, basePath\?: string\) => AxiosPromise<(.*)$`)
	creatorEnd = regexp.MustCompile(`(?m)^exports\.\w+AxiosParamCreator = `)
)

// apiRoutes reads the routes of one generated API: the operations of its
// axios parameter creator (js) and their parameter and answer types (d.ts).
func apiRoutes(plane, js, dts string) ([]Route, error) {
	if js == "" || dts == "" {
		return nil, fmt.Errorf("the pack has no such API")
	}
	if end := creatorEnd.FindStringIndex(js); end != nil {
		js = js[:end[0]]
	} else {
		return nil, fmt.Errorf("no axios parameter creator")
	}
	params := map[string]map[string]string{}
	for _, m := range paramSig.FindAllStringSubmatch(dts, -1) {
		if params[m[1]] == nil { // the first interface is the parameter creator's
			params[m[1]] = parseParams(m[2])
		}
	}
	resp := map[string]string{}
	for _, m := range respSig.FindAllStringSubmatch(dts, -1) {
		if _, ok := resp[m[1]]; !ok {
			t, inline := strings.CutSuffix(m[2], ">>;")
			if !inline { // an inline object type, over several lines
				t = "{}"
			}
			resp[m[1]] = normType(t)
		}
	}
	starts := opStart.FindAllStringSubmatchIndex(js, -1)
	if len(starts) == 0 {
		return nil, fmt.Errorf("no operations found")
	}
	var out []Route
	for i, st := range starts {
		end := len(js)
		if i+1 < len(starts) {
			end = starts[i+1][0]
		}
		body := js[st[1]:end]
		r := Route{Plane: plane, Op: js[st[2]:st[3]], Resp: resp[js[st[2]:st[3]]]}
		pm, mm := pathRe.FindStringSubmatch(body), methodRe.FindStringSubmatch(body)
		if pm == nil || mm == nil {
			return nil, fmt.Errorf("operation %s: no path or method", r.Op)
		}
		r.Path, r.Method = pm[1], mm[1]
		r.Query = uniq(queryRe.FindAllStringSubmatch(body, -1))
		r.Header = uniq(headerRe.FindAllStringSubmatch(body, -1))
		r.Form = uniq(formRe.FindAllStringSubmatch(body, -1))
		if bm := bodyRe.FindStringSubmatch(body); bm != nil {
			t, ok := params[r.Op][bm[1]]
			if !ok {
				return nil, fmt.Errorf("operation %s: no type for body parameter %s", r.Op, bm[1])
			}
			r.Body = normType(t)
		}
		out = append(out, r)
	}
	return out, nil
}

func uniq(ms [][]string) []string {
	var out []string
	for _, m := range ms {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// parseParams reads "name?: Type, other: Type" into name → type.
func parseParams(s string) map[string]string {
	out := map[string]string{}
	for _, p := range splitTop(s, ',') {
		n, t, ok := strings.Cut(p, ":")
		if !ok {
			continue
		}
		out[strings.TrimSuffix(strings.TrimSpace(n), "?")] = strings.TrimSpace(t)
	}
	return out
}

// splitTop splits s on sep outside brackets.
func splitTop(s string, sep byte) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '<', '{', '(', '[':
			depth++
		case '>', '}', ')', ']':
			depth--
		case sep:
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

var (
	arrayOf = regexp.MustCompile(`^Array<(.*)>$`)
	ident   = regexp.MustCompile(`^[A-Za-z_]\w*$`)
)

// normType writes a TypeScript type the table's way.
func normType(t string) string {
	t = strings.TrimSpace(t)
	var parts []string
	for _, p := range splitTop(t, '|') {
		if p = strings.TrimSpace(p); p != "null" && p != "undefined" {
			parts = append(parts, p)
		}
	}
	if len(parts) != 1 {
		return "any"
	}
	t = parts[0]
	switch {
	case t == "string" || t == "number" || t == "boolean" || t == "void":
		return t
	case t == "Date": // sent as an RFC 3339 string
		return "string"
	case t == "any" || t == "object" || t == "unknown" || t == "File" || t == "Blob":
		return "any"
	case strings.HasPrefix(t, "{"):
		return "map"
	case arrayOf.MatchString(t):
		return "[]" + normType(arrayOf.FindStringSubmatch(t)[1])
	case strings.HasSuffix(t, "[]"):
		return "[]" + normType(strings.TrimSuffix(t, "[]"))
	case ident.MatchString(t):
		return t
	}
	return "any"
}

var (
	ifaceStart = regexp.MustCompile(`^export interface (\w+)(?: extends (\w+))? \{$`)
	fieldLine  = regexp.MustCompile(`^    '([^']+)'\??: (.*)$`)
	enumStart  = regexp.MustCompile(`^export declare const (\w+): \{$`)
	enumValue  = regexp.MustCompile(`^    readonly \w+: "([^"]*)";$`)
)

// unknownEnumValue is the generated enums' stand-in for a value the client
// does not know; no server sends it.
const unknownEnumValue = "11184809"

type parsedModels struct {
	models  map[string][]Field
	extends map[string]string
	enums   map[string][]string
}

// addModels adds the models and enums the plane's routes use (and what
// they use in turn); a type the pack does not define becomes any, with a
// warning.
func (s *Spec) addModels(plane string, files map[string]string) []string {
	pm := parsedModels{models: map[string][]Field{}, extends: map[string]string{}, enums: map[string][]string{}}
	for name, text := range files {
		if strings.HasPrefix(name, "src/models/") && strings.HasSuffix(name, ".d.ts") {
			pm.parse(text)
		}
	}
	var warnings []string
	var todo []string
	for _, r := range s.Routes {
		if r.Plane == plane {
			todo = append(todo, r.Body, r.Resp)
		}
	}
	seen := map[string]bool{}
	resolve := func(t string) string {
		base := strings.TrimLeft(t, "[]")
		switch base {
		case "", "string", "number", "boolean", "void", "any", "map":
			return t
		}
		_, isModel := pm.models[base]
		_, isEnum := pm.enums[base]
		if !isModel && !isEnum {
			warnings = append(warnings, fmt.Sprintf("%s: type %s is not defined in the pack; taken as any", plane, base))
			return strings.Repeat("[]", (len(t)-len(base))/2) + "any"
		}
		todo = append(todo, base)
		return t
	}
	for len(todo) > 0 {
		t := strings.TrimLeft(todo[0], "[]")
		todo = todo[1:]
		if seen[t] {
			continue
		}
		seen[t] = true
		if vals, ok := pm.enums[t]; ok {
			s.enum(plane)[t] = vals
			continue
		}
		fields, ok := pm.fields(t)
		if !ok {
			resolve(t)
			continue
		}
		out := make([]Field, len(fields))
		for i, f := range fields {
			out[i] = Field{Name: f.Name, Type: resolve(f.Type)}
		}
		s.model(plane)[t] = out
	}
	for i, r := range s.Routes {
		if r.Plane == plane {
			s.Routes[i].Body, s.Routes[i].Resp = resolveRoot(r.Body, pm), resolveRoot(r.Resp, pm)
		}
	}
	return warnings
}

// resolveRoot turns a route's type the pack does not define into any.
func resolveRoot(t string, pm parsedModels) string {
	base := strings.TrimLeft(t, "[]")
	switch base {
	case "", "string", "number", "boolean", "void", "any", "map":
		return t
	}
	if _, ok := pm.models[base]; ok {
		return t
	}
	if _, ok := pm.enums[base]; ok {
		return t
	}
	return strings.Repeat("[]", (len(t)-len(base))/2) + "any"
}

func (s *Spec) enum(plane string) map[string][]string {
	if s.Enums[plane] == nil {
		s.Enums[plane] = map[string][]string{}
	}
	return s.Enums[plane]
}

// fields returns a model's fields, its parent's included.
func (pm parsedModels) fields(name string) ([]Field, bool) {
	f, ok := pm.models[name]
	if !ok {
		return nil, false
	}
	if parent := pm.extends[name]; parent != "" {
		pf, _ := pm.fields(parent)
		f = append(slices.Clone(pf), f...)
	}
	return f, true
}

// parse reads the interfaces and enums of one model file.
func (pm parsedModels) parse(text string) {
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		if m := ifaceStart.FindStringSubmatch(lines[i]); m != nil {
			fields := []Field{}
			for i++; i < len(lines) && lines[i] != "}"; i++ {
				fm := fieldLine.FindStringSubmatch(lines[i])
				if fm == nil {
					continue
				}
				typ := strings.TrimSuffix(fm[2], ";")
				if strings.TrimSpace(typ) == "{" { // a map, over several lines
					for i++; i < len(lines) && lines[i] != "    };"; i++ {
					}
					typ = "{}"
				}
				fields = append(fields, Field{Name: fm[1], Type: normType(typ)})
			}
			pm.models[m[1]], pm.extends[m[1]] = fields, m[2]
			continue
		}
		if m := enumStart.FindStringSubmatch(lines[i]); m != nil {
			var vals []string
			for i++; i < len(lines) && lines[i] != "};"; i++ {
				if vm := enumValue.FindStringSubmatch(lines[i]); vm != nil && vm[1] != unknownEnumValue {
					vals = append(vals, vm[1])
				}
			}
			pm.enums[m[1]] = vals
		}
	}
}

// sdkAppend matches the field name of a FormData append in the SDK.
var sdkAppend = regexp.MustCompile("form\\.append\\(\\s*['\"`]([^'\"`]+)['\"`]")

// sdkBulkUploadForm reads the multipart field names the SDK's file system
// sends to uploadFiles (the generated client leaves the form to it).
func sdkBulkUploadForm(js string) ([]string, error) {
	if !strings.Contains(js, "apiClient.uploadFiles(") {
		return nil, fmt.Errorf("FileSystem.js no longer calls uploadFiles")
	}
	var out []string
	for _, m := range sdkAppend.FindAllStringSubmatch(js, -1) {
		name := strings.ReplaceAll(m[1], "${i}", "{i}")
		name = index.ReplaceAllString(name, "[{i}]")
		if !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("FileSystem.js appends no form field")
	}
	return out, nil
}

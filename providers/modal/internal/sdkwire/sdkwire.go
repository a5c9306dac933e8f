// Package sdkwire reads the wire shapes of Modal's API (message field
// numbers and types, enum values, service methods) out of the protobuf code
// generated into Modal's published JavaScript SDK, the npm package "modal",
// so that boxfs's own .proto subset can be checked against the vendor's.
package sdkwire

//go:generate go run gen.go

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Package is the npm package the shapes are read from, pinned: the newest
// release of Modal's JavaScript SDK. (The registry's "latest" tag of
// "modal" names an unrelated package, so the version is always given.)
const Package = "modal@0.11.1"

// Field is one field of a message as the SDK encodes it.
type Field struct {
	Number   int
	Name     string // snake_case, as in the .proto
	Type     string // the writer's scalar method (string, int32, double, ...), a message name, or map<K,V>
	Repeated bool
	WireType int // the tag's low three bits
}

// String renders the field as one line of the golden form:
// "NUMBER NAME [repeated ]TYPE wWIRETYPE".
func (f Field) String() string {
	rep := ""
	if f.Repeated {
		rep = "repeated "
	}
	return fmt.Sprintf("%d %s %s%s w%d", f.Number, f.Name, rep, f.Type, f.WireType)
}

// Method is one RPC of a service.
type Method struct {
	Name, Request, Response    string
	ClientStream, ServerStream bool
}

// String renders the method as one line of the golden form:
// "NAME REQUEST RESPONSE unary|server-stream|client-stream|bidi".
func (m Method) String() string {
	kind := "unary"
	switch {
	case m.ClientStream && m.ServerStream:
		kind = "bidi"
	case m.ClientStream:
		kind = "client-stream"
	case m.ServerStream:
		kind = "server-stream"
	}
	return fmt.Sprintf("%s %s %s %s", m.Name, m.Request, m.Response, kind)
}

// Table is what the SDK's generated code says: messages by name (nested
// ones as Parent_Child), enums by name (number to value name), services by
// full name.
type Table struct {
	Messages map[string][]Field
	Enums    map[string]map[int]string
	Services map[string][]Method
}

var (
	reMessageStart = regexp.MustCompile(`^var ([A-Za-z0-9_]+) = \{$`)
	reScalar       = regexp.MustCompile(`writer\.uint32\((\d+)\)\.([a-z0-9]+)\((message\.([A-Za-z0-9_]+)|v)\)`)
	reNested       = regexp.MustCompile(`([A-Za-z0-9_]+)\.encode\((.*), writer\.uint32\((\d+)\)\.fork\(\)\)`)
	reFieldRef     = regexp.MustCompile(`message\.([A-Za-z0-9_]+)`)
	reForOf        = regexp.MustCompile(`^for \(const v of message\.([A-Za-z0-9_]+)\) \{$`)
	reEntries      = regexp.MustCompile(`^Object\.entries\(message\.([A-Za-z0-9_]+)\)\.forEach`)
	rePackedStart  = regexp.MustCompile(`^writer\.uint32\((\d+)\)\.fork\(\);$`)
	rePackedItem   = regexp.MustCompile(`^writer\.([a-z0-9]+)\(v\);$`)
	reEnumFunc     = regexp.MustCompile(`^function ([a-z][A-Za-z0-9_]*)FromJSON\(object\) \{$`)
	reEnumCase     = regexp.MustCompile(`^return (-?\d+) /\* ([A-Z0-9_]+) \*/;$`)
	reServiceFull  = regexp.MustCompile(`^fullName: "([a-z_.]+\.[A-Za-z]+)",$`)
	reMethodName   = regexp.MustCompile(`^name: "([A-Za-z0-9]+)",$`)
	reMethodField  = regexp.MustCompile(`^(requestType|responseType|requestStream|responseStream): ([A-Za-z0-9_]+),?$`)
)

// Extract reads the table out of the SDK's bundled ES module (dist/index.js).
func Extract(js []byte) (*Table, error) {
	t := &Table{Messages: map[string][]Field{}, Enums: map[string]map[int]string{}, Services: map[string][]Method{}}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(js))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		lines = append(lines, strings.TrimSpace(sc.Text()))
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i := 0; i < len(lines); i++ {
		if m := reMessageStart.FindStringSubmatch(lines[i]); m != nil && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "encode(") {
			fields, end, err := encodeBody(lines, i+2)
			if err != nil {
				return nil, fmt.Errorf("message %s: %w", m[1], err)
			}
			t.Messages[m[1]] = fields
			i = end
			continue
		}
		if m := reEnumFunc.FindStringSubmatch(lines[i]); m != nil {
			name := strings.ToUpper(m[1][:1]) + m[1][1:]
			vals := map[int]string{}
			for j := i + 1; j < len(lines) && lines[j] != "}"; j++ {
				if c := reEnumCase.FindStringSubmatch(lines[j]); c != nil && c[1] != "-1" { // -1 is ts-proto's UNRECOGNIZED, not the .proto's
					n, _ := strconv.Atoi(c[1])
					vals[n] = c[2]
				}
			}
			t.Enums[name] = vals
			continue
		}
		if m := reServiceFull.FindStringSubmatch(lines[i]); m != nil && i+1 < len(lines) && lines[i+1] == "methods: {" {
			t.Services[m[1]] = methods(lines, i+2)
		}
	}
	if len(t.Messages) == 0 {
		return nil, fmt.Errorf("no generated message encoders found")
	}
	// Resolve map fields: their entry message's key and value types.
	for name, fields := range t.Messages {
		for i, f := range fields {
			if entry, ok := strings.CutPrefix(f.Type, "map:"); ok {
				kv := t.Messages[entry]
				if len(kv) != 2 {
					return nil, fmt.Errorf("message %s: map field %s: entry %s has %d fields", name, f.Name, entry, len(kv))
				}
				fields[i].Type = "map<" + kv[0].Type + "," + kv[1].Type + ">"
				fields[i].Repeated = false
			}
		}
	}
	return t, nil
}

// encodeBody parses one encode function from line i to its "return
// writer;", and returns its fields and the line it ended on.
func encodeBody(lines []string, i int) ([]Field, int, error) {
	var fields []Field
	loopField, mapField, packedTag := "", "", 0
	for ; i < len(lines); i++ {
		l := lines[i]
		if l == "return writer;" {
			return fields, i, nil
		}
		if m := reForOf.FindStringSubmatch(l); m != nil {
			loopField = m[1]
			continue
		}
		if m := reEntries.FindStringSubmatch(l); m != nil {
			mapField = m[1]
		}
		if m := rePackedStart.FindStringSubmatch(l); m != nil {
			packedTag, _ = strconv.Atoi(m[1])
			continue
		}
		if l == "writer.join();" {
			packedTag = 0
			continue
		}
		if m := rePackedItem.FindStringSubmatch(l); m != nil && packedTag != 0 && loopField != "" {
			fields = append(fields, field(packedTag, loopField, m[1], true))
			continue
		}
		if m := reNested.FindStringSubmatch(l); m != nil {
			tag, _ := strconv.Atoi(m[3])
			arg := m[2]
			switch {
			case strings.Contains(arg, "{ key, value }") && mapField != "":
				fields = append(fields, field(tag, mapField, "map:"+m[1], false))
				mapField = ""
			case arg == "v" || strings.HasSuffix(arg, "(v)"):
				fields = append(fields, field(tag, loopField, m[1], true))
			default:
				ref := reFieldRef.FindStringSubmatch(arg)
				if ref == nil {
					return nil, i, fmt.Errorf("line %q: no field", l)
				}
				fields = append(fields, field(tag, ref[1], m[1], false))
			}
			continue
		}
		if m := reScalar.FindStringSubmatch(l); m != nil {
			tag, _ := strconv.Atoi(m[1])
			if m[3] == "v" {
				fields = append(fields, field(tag, loopField, m[2], true))
			} else {
				fields = append(fields, field(tag, m[4], m[2], false))
			}
		}
	}
	return nil, i, fmt.Errorf("no end of encode")
}

func field(tag int, jsName, typ string, repeated bool) Field {
	return Field{Number: tag >> 3, Name: snake(jsName), Type: typ, Repeated: repeated, WireType: tag & 7}
}

// snake turns ts-proto's camelCase field names back into the .proto's
// snake_case ones (a name that was not camelCase stays as it is).
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(r - 'A' + 'a')
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

// methods parses a service definition's methods, from line i to the end of
// its methods object.
func methods(lines []string, i int) []Method {
	var out []Method
	var cur *Method
	depth := 1
	for ; i < len(lines) && depth > 0; i++ {
		l := lines[i]
		depth += strings.Count(l, "{") - strings.Count(l, "}")
		if m := reMethodName.FindStringSubmatch(l); m != nil && depth == 2 {
			out = append(out, Method{Name: m[1]})
			cur = &out[len(out)-1]
			continue
		}
		if m := reMethodField.FindStringSubmatch(l); m != nil && cur != nil && depth == 2 {
			switch m[1] {
			case "requestType":
				cur.Request = m[2]
			case "responseType":
				cur.Response = m[2]
			case "requestStream":
				cur.ClientStream = m[2] == "true"
			case "responseStream":
				cur.ServerStream = m[2] == "true"
			}
		}
	}
	return out
}

// Format writes the part of t that names lists (messages, enums and
// services; nil: all of it) as sorted text, one line per field, value or
// method: the committed golden form.
func (t *Table) Format(messages, enums, services []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Wire shapes read from the npm package %s by providers/modal/internal/sdkwire.\n", Package)
	fmt.Fprintf(&b, "# Regenerate: go generate ./providers/modal/internal/sdkwire\n")
	for _, name := range pick(messages, t.Messages) {
		fmt.Fprintf(&b, "message %s\n", name)
		fs := slices.Clone(t.Messages[name])
		slices.SortFunc(fs, func(a, b Field) int { return a.Number - b.Number })
		for _, f := range fs {
			fmt.Fprintf(&b, "\t%s\n", f)
		}
	}
	for _, name := range pick(enums, t.Enums) {
		fmt.Fprintf(&b, "enum %s\n", name)
		vals := t.Enums[name]
		nums := make([]int, 0, len(vals))
		for n := range vals {
			nums = append(nums, n)
		}
		slices.Sort(nums)
		for _, n := range nums {
			fmt.Fprintf(&b, "\t%d %s\n", n, vals[n])
		}
	}
	for _, name := range pick(services, t.Services) {
		fmt.Fprintf(&b, "service %s\n", name)
		ms := slices.Clone(t.Services[name])
		slices.SortFunc(ms, func(a, b Method) int { return strings.Compare(a.Name, b.Name) })
		for _, m := range ms {
			fmt.Fprintf(&b, "\t%s\n", m)
		}
	}
	return b.String()
}

func pick[V any](names []string, m map[string]V) []string {
	var out []string
	if names == nil {
		for k := range m {
			out = append(out, k)
		}
	} else {
		for _, n := range names {
			if _, ok := m[n]; ok {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Fetch runs `npm pack` of Package into dir and returns the bytes of its
// dist/index.js.
func Fetch(ctx context.Context, dir string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "npm", "pack", "--silent", Package)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("npm pack %s: %w", Package, err)
	}
	tgz := filepath.Join(dir, strings.TrimSpace(lastLine(out)))
	x := exec.CommandContext(ctx, "tar", "-xzf", tgz, "-C", dir, "package/dist/index.js")
	if out, err := x.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("unpacking %s: %v: %s", tgz, err, out)
	}
	return os.ReadFile(filepath.Join(dir, "package", "dist", "index.js"))
}

func lastLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// Parse reads a table back from Format's text.
func Parse(text string) (*Table, error) {
	t := &Table{Messages: map[string][]Field{}, Enums: map[string]map[int]string{}, Services: map[string][]Method{}}
	kind, name := "", ""
	for i, line := range strings.Split(text, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !strings.HasPrefix(line, "\t") {
			k, n, ok := strings.Cut(line, " ")
			if !ok {
				return nil, fmt.Errorf("line %d: %q", i+1, line)
			}
			kind, name = k, n
			switch kind {
			case "message":
				t.Messages[name] = []Field{}
			case "enum":
				t.Enums[name] = map[int]string{}
			case "service":
				t.Services[name] = nil
			default:
				return nil, fmt.Errorf("line %d: unknown kind %q", i+1, kind)
			}
			continue
		}
		w := strings.Fields(line)
		var err error
		switch kind {
		case "message":
			err = parseField(t, name, w)
		case "enum":
			var n int
			if n, err = strconv.Atoi(w[0]); err == nil && len(w) == 2 {
				t.Enums[name][n] = w[1]
			}
		case "service":
			if len(w) != 4 {
				err = fmt.Errorf("want 4 words")
			} else {
				m := Method{Name: w[0], Request: w[1], Response: w[2]}
				m.ClientStream = w[3] == "client-stream" || w[3] == "bidi"
				m.ServerStream = w[3] == "server-stream" || w[3] == "bidi"
				t.Services[name] = append(t.Services[name], m)
			}
		default:
			err = fmt.Errorf("no message, enum or service above")
		}
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %v", i+1, line, err)
		}
	}
	return t, nil
}

func parseField(t *Table, msg string, w []string) error {
	if len(w) < 4 {
		return fmt.Errorf("want number, name, type and wire type")
	}
	f := Field{Name: w[1]}
	var err error
	if f.Number, err = strconv.Atoi(w[0]); err != nil {
		return err
	}
	rest := w[2:]
	if rest[0] == "repeated" {
		f.Repeated, rest = true, rest[1:]
	}
	if len(rest) != 2 || !strings.HasPrefix(rest[1], "w") {
		return fmt.Errorf("want type and wire type")
	}
	f.Type = rest[0]
	if f.WireType, err = strconv.Atoi(rest[1][1:]); err != nil {
		return err
	}
	t.Messages[msg] = append(t.Messages[msg], f)
	return nil
}

// FromDescriptors builds the table that files declare, in the SDK's terms:
// nested names joined with "_", enum fields as int32, map fields as
// map<K,V>. Map entry messages are left out, as the SDK's table folds them
// into their fields too.
func FromDescriptors(files ...protoreflect.FileDescriptor) *Table {
	t := &Table{Messages: map[string][]Field{}, Enums: map[string]map[int]string{}, Services: map[string][]Method{}}
	var addEnums func(es protoreflect.EnumDescriptors)
	addEnums = func(es protoreflect.EnumDescriptors) {
		for i := range es.Len() {
			e := es.Get(i)
			vals := map[int]string{}
			for j := range e.Values().Len() {
				v := e.Values().Get(j)
				vals[int(v.Number())] = string(v.Name())
			}
			t.Enums[LocalName(e)] = vals
		}
	}
	var addMessages func(ms protoreflect.MessageDescriptors)
	addMessages = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			m := ms.Get(i)
			if m.IsMapEntry() {
				continue
			}
			fields := []Field{}
			for j := range m.Fields().Len() {
				fields = append(fields, fieldOf(m.Fields().Get(j)))
			}
			t.Messages[LocalName(m)] = fields
			addEnums(m.Enums())
			addMessages(m.Messages())
		}
	}
	for _, fd := range files {
		addEnums(fd.Enums())
		addMessages(fd.Messages())
		for i := range fd.Services().Len() {
			s := fd.Services().Get(i)
			var ms []Method
			for j := range s.Methods().Len() {
				m := s.Methods().Get(j)
				ms = append(ms, Method{
					Name: string(m.Name()), Request: LocalName(m.Input()), Response: LocalName(m.Output()),
					ClientStream: m.IsStreamingClient(), ServerStream: m.IsStreamingServer(),
				})
			}
			t.Services[string(s.FullName())] = ms
		}
	}
	return t
}

// LocalName is a descriptor's name as the SDK's generated code spells it:
// the full name without the package, "." replaced by "_".
func LocalName(d protoreflect.Descriptor) string {
	name := strings.TrimPrefix(string(d.FullName()), string(d.ParentFile().Package())+".")
	return strings.ReplaceAll(name, ".", "_")
}

func fieldOf(fd protoreflect.FieldDescriptor) Field {
	f := Field{Number: int(fd.Number()), Name: string(fd.Name()), Repeated: fd.IsList()}
	switch {
	case fd.IsMap():
		f.Type = "map<" + kindType(fd.MapKey()) + "," + kindType(fd.MapValue()) + ">"
		f.WireType = int(protowire.BytesType)
	default:
		f.Type = kindType(fd)
		f.WireType = int(wireType(fd))
	}
	return f
}

func kindType(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		return "int32"
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return LocalName(fd.Message())
	}
	return fd.Kind().String()
}

// wireType is the wire type of one element of fd as a tag carries it;
// packed repeated scalars travel as one length-delimited record.
func wireType(fd protoreflect.FieldDescriptor) protowire.Type {
	if fd.IsList() && fd.IsPacked() {
		return protowire.BytesType
	}
	switch fd.Kind() {
	case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Int64Kind,
		protoreflect.Uint32Kind, protoreflect.Uint64Kind, protoreflect.Sint32Kind, protoreflect.Sint64Kind:
		return protowire.VarintType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	}
	return protowire.BytesType
}

// Names returns the names of t's messages, enums and services, each sorted.
func (t *Table) Names() (messages, enums, services []string) {
	for k := range t.Messages {
		messages = append(messages, k)
	}
	for k := range t.Enums {
		enums = append(enums, k)
	}
	for k := range t.Services {
		services = append(services, k)
	}
	slices.Sort(messages)
	slices.Sort(enums)
	slices.Sort(services)
	return
}

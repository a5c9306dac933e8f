package sdkwire_test

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers/modal/internal/pb"
	"github.com/boxfs/boxfs/providers/modal/internal/sdkwire"
)

var files = []protoreflect.FileDescriptor{pb.File_modal_proto_api_proto, pb.File_modal_proto_task_command_router_proto}

func golden(t *testing.T) *sdkwire.Table {
	t.Helper()
	b, err := os.ReadFile("testdata/sdk.golden")
	require.NoError(t, err)
	g, err := sdkwire.Parse(string(b))
	require.NoError(t, err)
	return g
}

// TestMessages checks every message of the .proto subset, field by field,
// against the SDK's: same number, name, type, cardinality and wire type.
func TestMessages(t *testing.T) {
	sdk, ours := golden(t), sdkwire.FromDescriptors(files...)
	msgs, _, _ := ours.Names()
	require.NotEmpty(t, msgs)
	for _, name := range msgs {
		t.Run(name, func(t *testing.T) {
			want, ok := sdk.Messages[name]
			require.True(t, ok, "the SDK has no message %s", name)
			for _, f := range ours.Messages[name] {
				i := slices.IndexFunc(want, func(w sdkwire.Field) bool { return w.Number == f.Number })
				if assert.GreaterOrEqual(t, i, 0, "field %d (%s) is not in the SDK's %s", f.Number, f.Name, name) {
					assert.Equal(t, want[i], f)
				}
			}
		})
	}
}

// TestEnums checks that every enum value of the subset is the SDK's.
func TestEnums(t *testing.T) {
	sdk, ours := golden(t), sdkwire.FromDescriptors(files...)
	_, enums, _ := ours.Names()
	for _, name := range enums {
		t.Run(name, func(t *testing.T) {
			want, ok := sdk.Enums[name]
			require.True(t, ok, "the SDK has no enum %s", name)
			for n, v := range ours.Enums[name] {
				assert.Equal(t, want[n], v, "value %d", n)
			}
		})
	}
}

// TestServices checks every method of the subset: its service's full name,
// its name, request and response types, and which sides stream.
func TestServices(t *testing.T) {
	sdk, ours := golden(t), sdkwire.FromDescriptors(files...)
	_, _, services := ours.Names()
	assert.Equal(t, []string{"modal.client.ModalClient", "modal.task_command_router.TaskCommandRouter"}, services)
	for _, name := range services {
		for _, m := range ours.Services[name] {
			t.Run(name+"/"+m.Name, func(t *testing.T) {
				i := slices.IndexFunc(sdk.Services[name], func(w sdkwire.Method) bool { return w.Name == m.Name })
				require.GreaterOrEqual(t, i, 0, "the SDK's %s has no method %s", name, m.Name)
				assert.Equal(t, sdk.Services[name][i], m)
			})
		}
	}
}

// TestEncoded fills every field of every message with a non-zero value,
// encodes it with the Go code the client and the fake both use, and checks
// each tag on the wire against the SDK's field of that number.
func TestEncoded(t *testing.T) {
	sdk := golden(t)
	ours := sdkwire.FromDescriptors(files...)
	msgs, _, _ := ours.Names()
	for _, name := range msgs {
		t.Run(name, func(t *testing.T) {
			md := findMessage(t, name)
			m := dynamicpb.NewMessage(md)
			fill(m, 2)
			b, err := proto.Marshal(m)
			require.NoError(t, err)
			seen := map[protowire.Number]bool{}
			for len(b) > 0 {
				num, typ, n := protowire.ConsumeTag(b)
				require.GreaterOrEqual(t, n, 0, "bad tag")
				b = b[n:]
				n = protowire.ConsumeFieldValue(num, typ, b)
				require.GreaterOrEqual(t, n, 0, "bad value of field %d", num)
				b = b[n:]
				seen[num] = true
				want := sdk.Messages[name]
				i := slices.IndexFunc(want, func(w sdkwire.Field) bool { return w.Number == int(num) })
				if assert.GreaterOrEqual(t, i, 0, "field %d on the wire is not in the SDK's %s", num, name) {
					assert.Equal(t, want[i].WireType, int(typ), "wire type of field %d (%s)", num, want[i].Name)
				}
			}
			fields := md.Fields()
			for i := range fields.Len() {
				if fields.Get(i).ContainingOneof() == nil || fields.Get(i).ContainingOneof().Fields().Get(0) == fields.Get(i) {
					assert.True(t, seen[fields.Get(i).Number()], "field %s was not encoded", fields.Get(i).Name())
				}
			}
		})
	}
}

func findMessage(t *testing.T, local string) protoreflect.MessageDescriptor {
	var found protoreflect.MessageDescriptor
	protoregistry.GlobalFiles.RangeFiles(func(fd protoreflect.FileDescriptor) bool {
		if !slices.Contains(files, fd) {
			return true
		}
		var walk func(ms protoreflect.MessageDescriptors)
		walk = func(ms protoreflect.MessageDescriptors) {
			for i := range ms.Len() {
				if sdkwire.LocalName(ms.Get(i)) == local {
					found = ms.Get(i)
				}
				walk(ms.Get(i).Messages())
			}
		}
		walk(fd.Messages())
		return found == nil
	})
	require.NotNil(t, found, "no descriptor for %s", local)
	return found
}

// fill sets every field of m (the first of each oneof) to a non-zero value,
// nesting messages depth levels deep.
func fill(m protoreflect.Message, depth int) {
	fields := m.Descriptor().Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		if o := fd.ContainingOneof(); o != nil && o.Fields().Get(0) != fd {
			continue
		}
		switch {
		case fd.IsMap():
			m.Mutable(fd).Map().Set(protoreflect.ValueOfString("k").MapKey(), sample(m, fd.MapValue(), depth))
		case fd.IsList():
			m.Mutable(fd).List().Append(sample(m, fd, depth))
		case fd.Kind() == protoreflect.MessageKind:
			if depth > 0 {
				fill(m.Mutable(fd).Message(), depth-1)
			}
			if !m.Has(fd) {
				m.Set(fd, protoreflect.ValueOfMessage(m.NewField(fd).Message()))
			}
		default:
			m.Set(fd, sample(m, fd, depth))
		}
	}
}

func sample(m protoreflect.Message, fd protoreflect.FieldDescriptor, depth int) protoreflect.Value {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.EnumKind:
		return protoreflect.ValueOfEnum(1)
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return protoreflect.ValueOfInt32(7)
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		return protoreflect.ValueOfInt64(7)
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return protoreflect.ValueOfUint32(7)
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return protoreflect.ValueOfUint64(7)
	case protoreflect.FloatKind:
		return protoreflect.ValueOfFloat32(1.5)
	case protoreflect.DoubleKind:
		return protoreflect.ValueOfFloat64(1.5)
	case protoreflect.StringKind:
		return protoreflect.ValueOfString("s")
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte("b"))
	}
	sub := dynamicpb.NewMessage(fd.Message())
	if depth > 0 {
		fill(sub, depth-1)
	}
	return protoreflect.ValueOfMessage(sub)
}

// TestGoldenIsTheSDKs re-reads the SDK from the npm registry and checks
// that the committed golden file is what it says today. It needs npm and
// the registry; without them it is skipped.
func TestGoldenIsTheSDKs(t *testing.T) {
	if testing.Short() {
		t.Skip("fetching the SDK with npm pack; -short skips it")
	}
	testbox.RequireNPM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	js, err := sdkwire.Fetch(ctx, t.TempDir())
	if err != nil {
		testbox.NPMUnavailable(t, "npm pack %s failed (no registry here?): %v", sdkwire.Package, err)
	}
	sdk, err := sdkwire.Extract(js)
	require.NoError(t, err)
	want, err := os.ReadFile("testdata/sdk.golden")
	require.NoError(t, err)
	ours := sdkwire.FromDescriptors(files...)
	assert.Equal(t, string(want), sdk.Format(ours.Names()), "run go generate ./providers/modal/internal/sdkwire")
}

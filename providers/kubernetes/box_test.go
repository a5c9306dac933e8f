package kubernetes_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/boxfs/boxfs/internal/testbox"
	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/kubernetes"
)

// cluster reads the test cluster's objects behind the provider's back.
type cluster struct {
	core, net rest.Interface
	ns        string
}

func newCluster(t *testing.T, p *kubernetes.Provider) *cluster {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", testbox.Kubeconfig())
	require.NoError(t, err)
	s := runtime.NewScheme()
	require.NoError(t, corev1.AddToScheme(s))
	require.NoError(t, networkingv1.AddToScheme(s))
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(s).WithoutConversion()
	c := &cluster{ns: p.Namespace()}
	core := rest.CopyConfig(cfg)
	core.APIPath, core.GroupVersion = "/api", &corev1.SchemeGroupVersion
	c.core, err = rest.RESTClientFor(core)
	require.NoError(t, err)
	nw := rest.CopyConfig(cfg)
	nw.APIPath, nw.GroupVersion = "/apis", &networkingv1.SchemeGroupVersion
	c.net, err = rest.RESTClientFor(nw)
	require.NoError(t, err)
	return c
}

func (c *cluster) pod(t *testing.T, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := c.core.Get().Namespace(c.ns).Resource("pods").Name(name).Do(context.Background()).Into(pod)
	return pod, err
}

// create makes a box with the test's label and spec, destroyed at the end.
func create(t *testing.T, p providers.Provider, spec providers.Spec) providers.Box {
	t.Helper()
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	spec.Labels[testLabel] = t.Name()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := p.Create(ctx, spec)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, b.Destroy(ctx))
	})
	return b
}

// run runs argv in b and returns its stdout; it must exit 0.
func run(t *testing.T, b providers.Box, req providers.ExecRequest) string {
	t.Helper()
	var out, errb bytes.Buffer
	req.Stdout, req.Stderr = &out, &errb
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, err := b.Exec(ctx, req)
	require.NoError(t, err)
	code, err := pr.Wait()
	require.NoError(t, err)
	require.Equal(t, 0, code, "%q: stderr %s", req.Argv, errb.String())
	return out.String()
}

// TestPodFromSpec checks what each spec field becomes, in the pod and in
// the box.
func TestPodFromSpec(t *testing.T) {
	p := newProvider(t, nil)
	c := newCluster(t, p)
	b := create(t, p, providers.Spec{
		Lifetime:     90 * time.Second,
		CPUs:         0.5,
		MemoryMB:     256,
		Env:          map[string]string{"A": "$(HOME)x$$y$"},
		Labels:       map[string]string{"team/name": "not a k8s value/ok"},
		User:         "1000:1000",
		Ports:        []int{8080},
		Capabilities: providers.Capabilities{Drop: []string{"ALL"}},
	})
	pod, err := c.pod(t, b.ID())
	require.NoError(t, err)
	assert.Equal(t, int64(90), *pod.Spec.ActiveDeadlineSeconds)
	assert.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
	assert.False(t, *pod.Spec.AutomountServiceAccountToken, "a box must not get the cluster's credentials")
	lim := pod.Spec.Containers[0].Resources.Limits
	assert.Equal(t, "500m", lim.Cpu().String())
	assert.Equal(t, "256Mi", lim.Memory().String())
	assert.Equal(t, pod.Spec.Containers[0].Resources.Requests, lim, "requests equal limits")
	assert.Equal(t, "1", pod.Labels["boxfs"])
	assert.NotContains(t, pod.Labels, "team/name", "a value Kubernetes refuses stays out of the pod's labels")

	assert.Equal(t, "not a k8s value/ok", b.Labels()["team/name"])
	found, err := p.List(context.Background(), map[string]string{"team/name": "not a k8s value/ok", testLabel: t.Name()})
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, b.ID(), found[0].ID())

	assert.Equal(t, "$(HOME)x$$y$", run(t, b, providers.ExecRequest{Argv: []string{"printenv", "A"}})[:12], "the kubelet's $(VAR) expansion must not touch env values")
	assert.Equal(t, "1000\n", run(t, b, providers.ExecRequest{Argv: []string{"id", "-u"}}))
	assert.Contains(t, run(t, b, providers.ExecRequest{Argv: []string{"grep", "CapEff", "/proc/self/status"}}), "0000000000000000")
	run(t, b, providers.ExecRequest{Argv: []string{"touch", "made-by-user"}}) // the workspace is the user's to write

	f, err := b.Facts(context.Background())
	require.NoError(t, err)
	assert.Equal(t, 0.5, f.CPUs)
	assert.Equal(t, 256, f.MemoryMB)
	assert.Equal(t, kubernetes.LifetimeVia, f.LifetimeVia)
	assert.Equal(t, []int{8080}, f.Ports)
	assert.Equal(t, providers.NetworkOpen, f.Network)
	assert.True(t, f.Runs("linux", "amd64") || f.Runs("linux", "arm64"), "facts %+v", f)
}

// TestExecEnvBytes: env values and argv that are not UTF-8 reach the
// command byte for byte, though the exec API carries only UTF-8.
func TestExecEnvBytes(t *testing.T) {
	p := newProvider(t, nil)
	b := create(t, p, providers.Spec{})
	v := "a\xff\xfe\\0101b"
	out := run(t, b, providers.ExecRequest{Argv: []string{"sh", "-c", `printf %s "$V"; printf '|%s' "$1"`, "sh", "x\x80\\n"}, Env: map[string]string{"V": v}})
	assert.Equal(t, v+"|x\x80\\n", out)
}

func TestMissingImage(t *testing.T) {
	p := newProvider(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := p.Create(ctx, providers.Spec{Image: "boxfs-no-such-image:1", Labels: map[string]string{testLabel: t.Name()}})
	require.Error(t, err)
	assert.Equal(t, providers.NotFound, providers.CodeOf(err), "%v", err)
	left, err := p.List(ctx, map[string]string{testLabel: t.Name()})
	require.NoError(t, err)
	assert.Empty(t, left, "a failed Create leaves no pod behind")
}

// TestLifetimeReaped: the cluster ends a box at its lifetime, and the next
// List deletes its pod.
func TestLifetimeReaped(t *testing.T) {
	p := newProvider(t, nil)
	c := newCluster(t, p)
	b := create(t, p, providers.Spec{Lifetime: 2 * time.Second})
	require.Eventually(t, func() bool {
		st, err := b.Status(context.Background())
		return err == nil && st.State == providers.StateEnded
	}, time.Minute, 200*time.Millisecond)
	st, err := b.Status(context.Background())
	require.NoError(t, err)
	assert.Equal(t, "lifetime passed", st.Reason)
	listed, err := p.List(context.Background(), map[string]string{testLabel: t.Name()})
	require.NoError(t, err)
	assert.Empty(t, listed)
	require.Eventually(t, func() bool { _, err := c.pod(t, b.ID()); return err != nil }, time.Minute, 200*time.Millisecond, "List deletes a pod past its lifetime")
	_, err = p.Attach(context.Background(), b.ID())
	assert.Equal(t, providers.NotFound, providers.CodeOf(err), "%v", err)
}

// TestDeletedBehindBack: a pod deleted by someone else is Gone to every call.
func TestDeletedBehindBack(t *testing.T) {
	p := newProvider(t, nil)
	c := newCluster(t, p)
	b := create(t, p, providers.Spec{})
	ctx := context.Background()
	pr, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"sleep", "300"}})
	require.NoError(t, err)
	require.NoError(t, c.core.Delete().Namespace(c.ns).Resource("pods").Name(b.ID()).Do(ctx).Error())
	done := make(chan error, 1)
	go func() { _, err := pr.Wait(); done <- err }()
	select {
	case err := <-done:
		assert.Contains(t, []providers.Code{providers.Gone, providers.TransportLost}, providers.CodeOf(err), "%v", err)
	case <-time.After(time.Minute):
		t.Fatal("a command in a deleted pod did not end within a minute")
	}
	require.Eventually(t, func() bool { _, err := b.Status(ctx); return providers.IsCode(err, providers.Gone) }, time.Minute, 200*time.Millisecond)
	_, err = b.Exec(ctx, providers.ExecRequest{Argv: []string{"true"}})
	assert.Equal(t, providers.Gone, providers.CodeOf(err), "%v", err)
}

func TestArchives(t *testing.T) {
	p := newProvider(t, nil)
	b := create(t, p, providers.Spec{})
	ar := b.(providers.Archiver)
	ctx := context.Background()

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755, ModTime: mtime}))
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "d/f", Mode: 0o640, Size: 3, ModTime: mtime, Uid: 4242}))
	_, err := tw.Write([]byte{0, 1, 0xff})
	require.NoError(t, err)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "d/l", Linkname: "f", ModTime: mtime}))
	require.NoError(t, tw.Close())
	require.NoError(t, ar.PutArchive(ctx, kubernetes.DefaultWorkspace, &buf))
	assert.Equal(t, "640 0 1577934245\n", run(t, b, providers.ExecRequest{Argv: []string{"stat", "-c", "%a %u %Y", "d/f"}}), "mode and mtime kept, owner the box's")

	rc, err := ar.GetArchive(ctx, kubernetes.DefaultWorkspace+"/d")
	require.NoError(t, err)
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		data, _ := io.ReadAll(tr)
		got[h.Name] = string(data) + h.Linkname
	}
	require.NoError(t, rc.Close())
	assert.Equal(t, map[string]string{"d/": "", "d/f": "\x00\x01\xff", "d/l": "f"}, got)

	_, err = ar.GetArchive(ctx, "/no/such/path")
	assert.Equal(t, providers.NotFound, providers.CodeOf(err), "%v", err)
	err = ar.PutArchive(ctx, "/no/such/dir", bytes.NewReader(emptyTar(t)))
	assert.Equal(t, providers.NotFound, providers.CodeOf(err), "%v", err)

	buf.Reset()
	tw = tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "../escaped", Mode: 0o644}))
	require.NoError(t, tw.Close())
	err = ar.PutArchive(ctx, kubernetes.DefaultWorkspace+"/d", &buf)
	assert.Equal(t, providers.Unsafe, providers.CodeOf(err), "%v", err)
	assert.Equal(t, "absent\n", run(t, b, providers.ExecRequest{Argv: []string{"sh", "-c", "test -e escaped && echo there || echo absent"}}))

	err = ar.PutArchive(ctx, kubernetes.DefaultWorkspace, strings.NewReader("not a tar at all, but long enough to be read as a header block..."))
	assert.Equal(t, providers.Invalid, providers.CodeOf(err), "%v", err)
}

func emptyTar(t *testing.T) []byte {
	var buf bytes.Buffer
	require.NoError(t, tar.NewWriter(&buf).Close())
	return buf.Bytes()
}

// TestEndpoint reaches a server in the box through a port forward.
func TestEndpoint(t *testing.T) {
	p := newProvider(t, nil)
	b := create(t, p, providers.Spec{Ports: []int{7070}})
	bin := echoServer(t)
	f, err := os.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	fi, err := f.Stat()
	require.NoError(t, err)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "echo", Mode: 0o755, Size: fi.Size()}))
	_, err = io.Copy(tw, f)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	ctx := context.Background()
	require.NoError(t, b.(providers.Archiver).PutArchive(ctx, "/tmp", &buf))
	srv, err := b.Exec(ctx, providers.ExecRequest{Argv: []string{"/tmp/echo", "127.0.0.1:7070"}})
	require.NoError(t, err)
	defer srv.Kill(ctx)

	ep := b.(providers.Endpointer)
	var conn net.Conn
	require.Eventually(t, func() bool {
		addr, err := ep.Endpoint(ctx, 7070)
		if err != nil {
			return false
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return false
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte("ping\n")); err != nil {
			c.Close()
			return false
		}
		line := make([]byte, 5)
		if _, err := io.ReadFull(c, line); err != nil || string(line) != "ping\n" {
			c.Close()
			return false
		}
		conn = c
		return true
	}, time.Minute, 300*time.Millisecond, "an echo through the Endpoint")
	conn.Close()
	addr1, err := ep.Endpoint(ctx, 7070)
	require.NoError(t, err)
	addr2, err := ep.Endpoint(ctx, 7070)
	require.NoError(t, err)
	assert.Equal(t, addr1, addr2, "one forward per port while it lasts")
	_, err = ep.Endpoint(ctx, 0)
	assert.Equal(t, providers.Invalid, providers.CodeOf(err))
}

// echoServer builds a static program that echoes lines on the address of
// its argument.
func echoServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := `package main

import (
	"io"
	"net"
	"os"
)

func main() {
	l, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		panic(err)
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module echo\n\ngo 1.26\n"), 0o644))
	cmd := exec.Command("go", "build", "-o", "echo", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return filepath.Join(dir, "echo")
}

// TestNetworkNone: with networkPolicy=enforced, network none is a
// NetworkPolicy of the pod's own that denies everything, removed with the
// box; Facts says none only while it is there.
func TestNetworkNone(t *testing.T) {
	p := newProvider(t, map[string]string{"networkPolicy": "enforced"})
	c := newCluster(t, p)
	ctx := context.Background()
	b := create(t, p, providers.Spec{Network: providers.Network{Mode: providers.NetworkNone}})
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, c.net.Get().Namespace(c.ns).Resource("networkpolicies").Name(b.ID()).Do(ctx).Into(np))
	assert.Equal(t, map[string]string{"boxfs.pod": b.ID()}, np.Spec.PodSelector.MatchLabels)
	assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes)
	assert.Empty(t, np.Spec.Ingress)
	assert.Empty(t, np.Spec.Egress)
	pod, err := c.pod(t, b.ID())
	require.NoError(t, err)
	assert.Equal(t, b.ID(), pod.Labels["boxfs.pod"])
	owners, _ := json.Marshal(np.OwnerReferences)
	assert.Contains(t, string(owners), string(pod.UID), "the pod owns its policy")

	f, err := b.Facts(ctx)
	require.NoError(t, err)
	assert.Equal(t, providers.NetworkNone, f.Network)
	require.NoError(t, c.net.Delete().Namespace(c.ns).Resource("networkpolicies").Name(b.ID()).Do(ctx).Error())
	f, err = b.Facts(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, providers.NetworkNone, f.Network, "a box whose policy is gone is not fenced")

	b2 := create(t, p, providers.Spec{Network: providers.Network{Mode: providers.NetworkNone}})
	require.NoError(t, b2.Destroy(ctx))
	err = c.net.Get().Namespace(c.ns).Resource("networkpolicies").Name(b2.ID()).Do(ctx).Error()
	assert.Error(t, err, "Destroy removes the policy")
}

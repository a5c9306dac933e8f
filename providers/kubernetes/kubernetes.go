// Package kubernetes runs boxes as Kubernetes pods, through the API server.
//
// A box is one pod (restartPolicy Never) of one container, "box", whose
// command is a keeper shell that sleeps for ever as the container's PID 1:
// nothing a program in the box does (kill -9 -1) ends the box. The pod's
// activeDeadlineSeconds is the box's lifetime, so the cluster ends it with
// no call from the host; boxfs deletes such ended pods when it next lists.
// Commands run through the pods/exec subresource (WebSocket v5, SPDY when
// the server does not take it), each as its own process group; archives
// move as tar streams over exec, as kubectl cp does.
//
// The cluster is the one the kubeconfig names (the "kubeconfig" option,
// else KUBECONFIG or ~/.kube/config, else the in-cluster service account);
// the namespace is the "namespace" option, else the context's. Every pod
// carries the labels boxfs=1 and boxfs.provider=kubernetes; the box's own
// labels are kept whole in an annotation (Kubernetes label values are too
// narrow for them) and, where they are valid label pairs, as labels too.
package kubernetes

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"math"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/boxfs/boxfs/providers"
)

// Name is the provider's registry name.
const Name = "kubernetes"

const (
	// DefaultImage is the image a box runs when the spec names none: the
	// offline Debian image scripts/docker-up builds and scripts/k8s-up
	// imports into its cluster.
	DefaultImage = "boxfs-base:latest"
	// DefaultWorkspace is the box-side workspace when the spec names none.
	DefaultWorkspace = "/workspace"
	// containerName is the name of the pod's one container.
	containerName = "box"
	// basePath is the PATH every box process starts with.
	basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	tmpDir   = "/tmp"
	// startTimeout bounds how long Create waits for a pod to run when the
	// caller's ctx allows longer.
	startTimeout = 5 * time.Minute
)

// Labels and annotations the provider sets on every pod. Callers may not
// set labels under "boxfs" (providers.ReservedLabel).
const (
	labelMarker     = "boxfs"          // label "1": a boxfs box
	labelProvider   = "boxfs.provider" // label "kubernetes"
	labelPod        = "boxfs.pod"      // label: the pod's own name, for its NetworkPolicy
	annotLabels     = "boxfs.labels"   // the box's labels as JSON, the caller's and ours
	annotLifetime   = "boxfs.lifetime" // seconds
	annotCreated    = "boxfs.created"  // RFC 3339, UTC
	annotWorkspace  = "boxfs.workspace"
	annotUser       = "boxfs.user"  // "uid:gid", absent for the image's user
	annotPorts      = "boxfs.ports" // comma-separated
	annotNetPolicy  = "boxfs.networkpolicy"
	reasonDeadline  = "DeadlineExceeded" // the pod's status reason once its lifetime passed
	networkEnforced = "enforced"
)

func init() {
	providers.Register(Name, func(cfg providers.Config) (providers.Provider, error) { return New(cfg) })
}

// The scheme holds the only kinds the provider speaks: core/v1 (pods, exec
// options, statuses) and networking/v1 (NetworkPolicy). No typed clientset.
var (
	scheme     = runtime.NewScheme()
	codecs     = serializer.NewCodecFactory(scheme)
	paramCodec = runtime.NewParameterCodec(scheme)
)

func init() {
	if err := corev1.AddToScheme(scheme); err != nil {
		panic(err)
	}
	if err := networkingv1.AddToScheme(scheme); err != nil {
		panic(err)
	}
}

// Provider makes boxes as pods of one namespace of one cluster.
type Provider struct {
	cfg       *rest.Config // the cluster's, for the exec and port-forward streams
	core      rest.Interface
	net       rest.Interface
	namespace string
	image     string
	// netPolicy: the cluster enforces NetworkPolicy, so network "none" can
	// be honoured with one (the API cannot tell; the operator says so).
	netPolicy bool
	log       *slog.Logger
}

var _ providers.Provider = (*Provider)(nil)

// New opens the provider. Options:
//
//	kubeconfig     the kubeconfig file (default: KUBECONFIG, ~/.kube/config,
//	               else the in-cluster service account)
//	context        the kubeconfig context (default: its current context)
//	namespace      where pods are made (default: the context's, else "default")
//	image          the image of a box whose spec names none (default boxfs-base:latest)
//	networkPolicy  "enforced" when the cluster's network plugin enforces
//	               NetworkPolicy; only then is network "none" honoured
//
// New reads the kubeconfig but does not contact the cluster; the first call
// that needs it does.
func New(cfg providers.Config) (*Provider, error) {
	const op = "kubernetes.New"
	if err := providers.CheckOptions(op, cfg.Options, "kubeconfig", "context", "namespace", "image", "networkPolicy"); err != nil {
		return nil, err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if v := cfg.Options["kubeconfig"]; v != "" {
		rules.ExplicitPath = v
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: cfg.Options["context"]})
	rc, err := cc.ClientConfig()
	if err != nil {
		return nil, providers.E(providers.Invalid, op, err)
	}
	ns := cfg.Options["namespace"]
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, providers.E(providers.Invalid, op, err)
		}
	}
	p := &Provider{namespace: ns, image: DefaultImage, log: cfg.Logger}
	if p.log == nil {
		p.log = slog.Default()
	}
	quietKlog(p.log)
	if v := cfg.Options["image"]; v != "" {
		p.image = v
	}
	switch v := cfg.Options["networkPolicy"]; v {
	case "":
	case networkEnforced:
		p.netPolicy = true
	default:
		return nil, providers.Errorf(providers.Invalid, op, "option networkPolicy=%q: the one value is %q", v, networkEnforced)
	}
	if err := p.connect(rc); err != nil {
		return nil, providers.E(providers.Invalid, op, err)
	}
	return p, nil
}

// connect makes the REST clients for core/v1 and networking/v1 over one
// HTTP client.
func (p *Provider) connect(base *rest.Config) error {
	cfg := rest.CopyConfig(base)
	cfg.UserAgent = "boxfs"
	// Every box call is a request or two; the default 5/s would queue a
	// busy mount behind the client's own rate limiter.
	cfg.QPS, cfg.Burst = 50, 100
	cfg.NegotiatedSerializer = codecs.WithoutConversion()
	p.cfg = cfg
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	core := rest.CopyConfig(cfg)
	core.APIPath, core.GroupVersion = "/api", &corev1.SchemeGroupVersion
	if p.core, err = rest.RESTClientForConfigAndClient(core, hc); err != nil {
		return err
	}
	nw := rest.CopyConfig(cfg)
	nw.APIPath, nw.GroupVersion = "/apis", &networkingv1.SchemeGroupVersion
	p.net, err = rest.RESTClientForConfigAndClient(nw, hc)
	return err
}

// Name returns "kubernetes".
func (p *Provider) Name() string { return Name }

// Namespace returns the namespace the provider makes pods in.
func (p *Provider) Namespace() string { return p.namespace }

// Ping checks that the API server answers and the namespace exists.
func (p *Provider) Ping(ctx context.Context) error {
	var ns corev1.Namespace
	if err := p.core.Get().Resource("namespaces").Name(p.namespace).Do(ctx).Into(&ns); err != nil {
		return wrap("kubernetes.Ping", "", err)
	}
	return nil
}

// supported are the spec fields Create honours; the others are refused.
var supported = []string{
	"image", "lifetime", "cpus", "memoryMb", "isolation", "network", "ports", "env",
	"labels", "workspace", "user", "capabilities",
}

// Create makes a pod for spec and returns once its container runs.
// Snapshot, region, gpu and mounts are Unsupported, as are isolation other
// than "container", an allowlist, and network "none" unless the cluster is
// said to enforce NetworkPolicy. An image the node cannot get is NotFound.
func (p *Provider) Create(ctx context.Context, spec providers.Spec) (providers.Box, error) {
	const op = "kubernetes.Create"
	if err := spec.Validate(); err != nil {
		return nil, providers.E(0, op, err)
	}
	if err := spec.CheckSupported(op, supported...); err != nil {
		return nil, err
	}
	if spec.Isolation != "" && spec.Isolation != providers.IsolationContainer {
		return nil, providers.Errorf(providers.Unsupported, op, "isolation %q: kubernetes boxes are containers", spec.Isolation)
	}
	switch spec.Network.Mode {
	case "", providers.NetworkOpen:
	case providers.NetworkNone:
		if !p.netPolicy {
			return nil, providers.Errorf(providers.Unsupported, op, "network none needs a cluster that enforces NetworkPolicy (provider option networkPolicy=enforced); this one is not said to")
		}
	default:
		return nil, providers.Errorf(providers.Unsupported, op, "network mode %q: kubernetes boxes have no egress allowlist", spec.Network.Mode)
	}
	for k, v := range spec.Env {
		if !utf8.ValidString(v) {
			return nil, providers.Errorf(providers.Invalid, op, "env %s is not UTF-8 (the API carries JSON strings)", k)
		}
	}
	name := "boxfs-" + providers.NewID(6)
	pod, err := p.podFor(name, spec)
	if err != nil {
		return nil, providers.E(0, op, err)
	}
	if spec.Network.Mode == providers.NetworkNone {
		if err := p.createPolicy(ctx, name); err != nil {
			return nil, wrap(op, name, err)
		}
	}
	created := &corev1.Pod{}
	if err := p.core.Post().Namespace(p.namespace).Resource("pods").Body(pod).Do(ctx).Into(created); err != nil {
		p.cleanup(ctx, name, pod.Annotations)
		return nil, wrap(op, name, err)
	}
	b := p.newBox(created)
	if err := b.waitRunning(ctx); err != nil {
		p.cleanup(ctx, name, pod.Annotations)
		return nil, providers.E(0, op, err).WithBox(name)
	}
	if spec.Network.Mode == providers.NetworkNone {
		p.ownPolicy(ctx, created)
	}
	return b, nil
}

// cleanup removes what a failed Create made, even when ctx is what failed.
func (p *Provider) cleanup(ctx context.Context, name string, annots map[string]string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := p.deletePod(ctx, name); err != nil && errorCode(err) != providers.NotFound {
		p.log.Warn("kubernetes: removing a pod whose start failed", "box", name, "err", err)
	}
	if annots[annotNetPolicy] != "" {
		if err := p.deletePolicy(ctx, name); err != nil && errorCode(err) != providers.NotFound {
			p.log.Warn("kubernetes: removing the NetworkPolicy of a pod whose start failed", "box", name, "err", err)
		}
	}
}

// podFor builds the pod of a box.
func (p *Provider) podFor(name string, spec providers.Spec) (*corev1.Pod, error) {
	ws := DefaultWorkspace
	if spec.Workspace != "" {
		ws = path.Clean(spec.Workspace)
	}
	image := spec.Image
	if image == "" {
		image = p.image
	}
	secs := int64(math.Ceil(spec.LifetimeOrDefault().Seconds()))

	all := maps.Clone(spec.Labels)
	if all == nil {
		all = map[string]string{}
	}
	all[labelMarker] = "1"
	all[labelProvider] = Name
	labelsJSON, err := json.Marshal(all)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{labelMarker: "1", labelProvider: Name, labelPod: name}
	for k, v := range spec.Labels {
		if validLabel(k, v) {
			labels[k] = v
		}
	}
	annots := map[string]string{
		annotLabels:    string(labelsJSON),
		annotLifetime:  strconv.FormatInt(secs, 10),
		annotCreated:   time.Now().UTC().Format(time.RFC3339Nano),
		annotWorkspace: ws,
	}
	if spec.User != "" {
		annots[annotUser] = spec.User
	}
	if len(spec.Ports) > 0 {
		ps := make([]string, len(spec.Ports))
		for i, port := range spec.Ports {
			ps[i] = strconv.Itoa(port)
		}
		annots[annotPorts] = strings.Join(ps, ",")
	}
	if spec.Network.Mode == providers.NetworkNone {
		annots[annotNetPolicy] = name
	}

	c := corev1.Container{
		Name:            containerName,
		Image:           image,
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         escapeExpansion([]string{"/bin/sh", "-c", keeperScript, "boxfs-keeper"}),
		Env:             boxEnv(spec.Env, spec.User, ws),
		WorkingDir:      ws,
		Resources:       resources(spec),
		SecurityContext: securityContext(spec),
	}
	for _, port := range spec.Ports {
		c.Ports = append(c.Ports, corev1.ContainerPort{ContainerPort: int32(port), Protocol: corev1.ProtocolTCP})
	}
	no := false
	grace := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: p.namespace, Labels: labels, Annotations: annots},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			ActiveDeadlineSeconds:         &secs,
			TerminationGracePeriodSeconds: &grace,
			// A box holds no credentials of the cluster's and sees no
			// service's address in its environment.
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			Containers:                   []corev1.Container{c},
		},
	}
	if ws != "/" {
		// An emptyDir, so the workspace is writable whatever the image has
		// at that path (a non-root user included: it is made 0777).
		pod.Spec.Volumes = []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "workspace", MountPath: ws}}
	}
	return pod, nil
}

// validLabel reports whether k=v is a valid Kubernetes label, so that a box
// label can also be a pod label (for kubectl and for server-side selection).
func validLabel(k, v string) bool {
	return len(validation.IsQualifiedName(k)) == 0 && len(validation.IsValidLabelValue(v)) == 0
}

// escapeExpansion doubles every "$" so that the kubelet's $(VAR) expansion
// of command and env values gives back the text as written.
func escapeExpansion(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = strings.ReplaceAll(s, "$", "$$")
	}
	return out
}

// boxEnv is the environment every process of a box starts with: the fixed
// base, then the spec's. Nothing of the host's.
func boxEnv(spec map[string]string, user, ws string) []corev1.EnvVar {
	env := map[string]string{"PATH": basePath, "HOME": "/root", "TMPDIR": tmpDir}
	if uid, _, ok := providers.ParseUser(user); ok && uid != 0 {
		env["HOME"] = ws // /root is not the user's
	}
	maps.Copy(env, spec)
	out := make([]corev1.EnvVar, 0, len(env))
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, corev1.EnvVar{Name: k, Value: strings.ReplaceAll(env[k], "$", "$$")})
	}
	return out
}

// resources are the spec's cpus and memory as requests equal to limits, so
// the box gets what it asked for and no more.
func resources(spec providers.Spec) corev1.ResourceRequirements {
	rl := corev1.ResourceList{}
	if spec.CPUs > 0 {
		rl[corev1.ResourceCPU] = *resource.NewMilliQuantity(int64(math.Round(spec.CPUs*1000)), resource.DecimalSI)
	}
	if spec.MemoryMB > 0 {
		rl[corev1.ResourceMemory] = *resource.NewQuantity(int64(spec.MemoryMB)<<20, resource.BinarySI)
	}
	if len(rl) == 0 {
		return corev1.ResourceRequirements{}
	}
	return corev1.ResourceRequirements{Requests: rl, Limits: maps.Clone(rl)}
}

// securityContext sets the user and drops capabilities.
func securityContext(spec providers.Spec) *corev1.SecurityContext {
	if spec.User == "" && len(spec.Capabilities.Drop) == 0 {
		return nil
	}
	sc := &corev1.SecurityContext{}
	if uid, gid, ok := providers.ParseUser(spec.User); ok {
		u, g := int64(uid), int64(gid)
		sc.RunAsUser, sc.RunAsGroup = &u, &g
	}
	if len(spec.Capabilities.Drop) > 0 {
		sc.Capabilities = &corev1.Capabilities{}
		for _, c := range spec.Capabilities.Drop {
			// Kubernetes names capabilities without the CAP_ prefix.
			name := strings.TrimPrefix(strings.ToUpper(c), "CAP_")
			sc.Capabilities.Drop = append(sc.Capabilities.Drop, corev1.Capability(name))
		}
	}
	return sc
}

// Attach finds a box by pod name. A pod that is gone, or that boxfs did not
// make, is NotFound.
func (p *Provider) Attach(ctx context.Context, id string) (providers.Box, error) {
	const op = "kubernetes.Attach"
	if id == "" {
		return nil, providers.Errorf(providers.Invalid, op, "empty box id")
	}
	if len(validation.IsDNS1123Subdomain(id)) > 0 {
		return nil, providers.Errorf(providers.NotFound, op, "%q is not a pod name", id).WithBox(id)
	}
	pod, err := p.getPod(ctx, id)
	if err != nil {
		return nil, wrap(op, id, err)
	}
	if pod.Labels[labelMarker] != "1" || pod.Labels[labelProvider] != Name {
		return nil, providers.Errorf(providers.NotFound, op, "pod %s is not a boxfs box", id).WithBox(id)
	}
	if pod.DeletionTimestamp != nil {
		return nil, providers.Errorf(providers.NotFound, op, "pod %s is being deleted", id).WithBox(id)
	}
	return p.newBox(pod), nil
}

// List returns the boxes carrying every label in labels. Pods whose
// lifetime passed are deleted on the way and not listed; pods being
// deleted are not listed either.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]providers.Box, error) {
	const op = "kubernetes.List"
	sel := []string{labelMarker + "=1", labelProvider + "=" + Name}
	for k, v := range labels {
		if validLabel(k, v) {
			sel = append(sel, k+"="+v)
		}
	}
	slices.Sort(sel)
	var list corev1.PodList
	err := p.core.Get().Namespace(p.namespace).Resource("pods").
		VersionedParams(&metav1.ListOptions{LabelSelector: strings.Join(sel, ",")}, paramCodec).
		Do(ctx).Into(&list)
	if err != nil {
		return nil, wrap(op, "", err)
	}
	out := make([]providers.Box, 0, len(list.Items))
	for i := range list.Items {
		pod := &list.Items[i]
		if pod.DeletionTimestamp != nil {
			continue
		}
		if pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == reasonDeadline {
			p.reap(ctx, pod)
			continue
		}
		b := p.newBox(pod)
		if providers.MatchLabels(b.labels, labels) {
			out = append(out, b)
		}
	}
	return out, nil
}

// reap deletes a pod whose lifetime passed, and its NetworkPolicy.
func (p *Provider) reap(ctx context.Context, pod *corev1.Pod) {
	if err := p.deletePod(ctx, pod.Name); err != nil && errorCode(err) != providers.NotFound {
		p.log.Warn("kubernetes: deleting a pod past its lifetime", "box", pod.Name, "err", err)
		return
	}
	if pod.Annotations[annotNetPolicy] != "" {
		if err := p.deletePolicy(ctx, pod.Name); err != nil && errorCode(err) != providers.NotFound {
			p.log.Warn("kubernetes: deleting the NetworkPolicy of a pod past its lifetime", "box", pod.Name, "err", err)
		}
	}
	p.log.Info("kubernetes: deleted a pod past its lifetime", "box", pod.Name)
}

func (p *Provider) getPod(ctx context.Context, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	err := p.core.Get().Namespace(p.namespace).Resource("pods").Name(name).Do(ctx).Into(pod)
	return pod, err
}

// deletePod deletes a pod at once: the kubelet kills its processes without
// a grace period.
func (p *Provider) deletePod(ctx context.Context, name string) error {
	zero := int64(0)
	return p.core.Delete().Namespace(p.namespace).Resource("pods").Name(name).
		Body(&metav1.DeleteOptions{GracePeriodSeconds: &zero}).Do(ctx).Error()
}

// keeperScript is a box's PID 1: it sleeps for ever; the pod's
// activeDeadlineSeconds ends it. PID 1 of a PID namespace gets no signal
// from inside it that it has no handler for, SIGKILL included, so nothing a
// box runs can end the box early; a sleep killed from inside is started
// again. Its wait reaps every child, the orphans commands leave included.
const keeperScript = `trap '' HUP INT QUIT TERM USR1 USR2 PIPE
while :; do
	sleep 2147483647 &
	wait $!
done
`

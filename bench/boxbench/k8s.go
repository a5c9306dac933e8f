package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/boxfs/boxfs/providers"
	"github.com/boxfs/boxfs/providers/kubernetes"
)

// k8sPeer is the name of the boxfs peer whose box is a Kubernetes pod: the
// cost of a pod over the container boxfs presents in the "boxfs" peer.
const k8sPeer = "boxfs-k8s"

// kubeconfig is the cluster of the boxfs-k8s peer: KUBECONFIG, else the one
// scripts/k8s-up writes.
func kubeconfig() string {
	if v := os.Getenv("KUBECONFIG"); v != "" {
		return v
	}
	return "/var/lib/boxfs-k8s/kubeconfig"
}

// k8sBox makes the pod p presents and gives p its probe and seeding; the
// returned func destroys the pod.
func (r *run) k8sBox(ctx context.Context, p *peer) (func(), error) {
	kc := kubeconfig()
	prov, err := kubernetes.New(providers.Config{Options: map[string]string{"kubeconfig": kc}})
	if err != nil {
		return nil, err
	}
	box, err := prov.Create(ctx, providers.Spec{Labels: map[string]string{"boxfs-bench": "run"}, Lifetime: 3 * time.Hour})
	if err != nil {
		return nil, fmt.Errorf("creating the bench pod (is the cluster up? scripts/k8s-up): %w", err)
	}
	r.pod, r.kubeconfig = box.ID(), kc
	p.probe = newProbe(r.self, "k8s-exec", kc, r.pod)
	p.seedTar = func(ctx context.Context, data []byte, dir string) error {
		cmd := exec.CommandContext(ctx, r.self, "k8s-exec", kc, r.pod, "tar", "-x", "-C", dir)
		cmd.Stdin = bytes.NewReader(data)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("tar -x in the pod: %v: %s", err, clip(string(out), 300))
		}
		return nil
	}
	return func() {
		p.probe.close()
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := box.Destroy(dctx); err != nil {
			fmt.Fprintf(os.Stderr, "destroying the bench pod: %v\n", err)
		}
	}, nil
}

// k8sExecMain is `boxbench k8s-exec KUBECONFIG POD ARGV...`: ARGV runs in
// the pod with this process's stdin, stdout and stderr, and this process
// exits with its status. The boxfs-k8s peer's probe and seeding run
// through it, as the docker peers' run through docker exec.
func k8sExecMain(args []string) error {
	if len(args) < 3 {
		return errors.New("usage: boxbench k8s-exec KUBECONFIG POD ARGV...")
	}
	prov, err := kubernetes.New(providers.Config{Options: map[string]string{"kubeconfig": args[0]}})
	if err != nil {
		return err
	}
	ctx := context.Background()
	box, err := prov.Attach(ctx, args[1])
	if err != nil {
		return err
	}
	pr, err := box.Exec(ctx, providers.ExecRequest{Argv: args[2:], Dir: "/", Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr})
	if err != nil {
		return err
	}
	code, err := pr.Wait()
	if err != nil {
		return err
	}
	os.Exit(code)
	return nil
}

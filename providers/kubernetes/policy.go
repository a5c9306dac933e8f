package kubernetes

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// createPolicy makes the NetworkPolicy of a box with network "none": it
// selects the pod by its boxfs.pod label and allows no ingress and no
// egress. It is made before the pod, so the pod never runs unfenced.
func (p *Provider) createPolicy(ctx context.Context, name string) error {
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: p.namespace,
			Labels:    map[string]string{labelMarker: "1", labelProvider: Name, labelPod: name},
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{labelPod: name}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		},
	}
	return p.net.Post().Namespace(p.namespace).Resource("networkpolicies").Body(np).Do(ctx).Error()
}

// ownPolicy makes the pod the owner of its NetworkPolicy, so the cluster's
// garbage collector removes the policy with the pod even when boxfs never
// deletes it (the pod was deleted by someone else). Best effort: Destroy
// deletes the policy itself.
func (p *Provider) ownPolicy(ctx context.Context, pod *corev1.Pod) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID,
	}}}})
	err := p.net.Patch(types.MergePatchType).Namespace(p.namespace).Resource("networkpolicies").Name(pod.Name).Body(patch).Do(ctx).Error()
	if err != nil {
		p.log.Warn("kubernetes: making the pod the owner of its NetworkPolicy", "box", pod.Name, "err", err)
	}
}

func (p *Provider) deletePolicy(ctx context.Context, name string) error {
	return p.net.Delete().Namespace(p.namespace).Resource("networkpolicies").Name(name).Do(ctx).Error()
}

// getPolicy reads a box's NetworkPolicy (for Facts: a box with network
// "none" whose policy was removed is no longer fenced).
func (p *Provider) getPolicy(ctx context.Context, name string) (*networkingv1.NetworkPolicy, error) {
	np := &networkingv1.NetworkPolicy{}
	if err := p.net.Get().Namespace(p.namespace).Resource("networkpolicies").Name(name).Do(ctx).Into(np); err != nil {
		return nil, wrap("kubernetes.NetworkPolicy", name, err)
	}
	return np, nil
}

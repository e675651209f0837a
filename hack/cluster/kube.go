package main

// The API as the harness reads it: through kubectl with the administrator's kubeconfig.

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

type Kube struct {
	Kubectl, Kubeconfig string
}

func (k Kube) Run(args ...string) (string, error) {
	return run(k.Kubectl, append([]string{"--kubeconfig=" + k.Kubeconfig}, args...)...)
}

// NodeInfo is what the harness needs of a Node object.
type NodeInfo struct {
	Name, PodCIDR, Ready, ReadyMessage string
	Taints                             []string
}

func (k Kube) Nodes() (map[string]NodeInfo, error) {
	out, err := k.Run("get", "nodes", "-o", "json")
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []struct {
			Metadata struct{ Name string }
			Spec     struct {
				PodCIDR string
				Taints  []struct{ Key, Effect string }
			}
			Status struct {
				Conditions []struct{ Type, Status, Reason, Message string }
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, fmt.Errorf("kubectl get nodes: %w", err)
	}
	nodes := map[string]NodeInfo{}
	for _, it := range list.Items {
		ni := NodeInfo{Name: it.Metadata.Name, PodCIDR: it.Spec.PodCIDR, Ready: "Unknown"}
		for _, t := range it.Spec.Taints {
			ni.Taints = append(ni.Taints, t.Key+":"+t.Effect)
		}
		for _, cond := range it.Status.Conditions {
			if cond.Type == "Ready" {
				ni.Ready, ni.ReadyMessage = cond.Status, cond.Reason+": "+cond.Message
			}
		}
		nodes[ni.Name] = ni
	}
	return nodes, nil
}

// describeNodes is a one-line summary of the nodes, for a wait's last state.
func describeNodes(nodes map[string]NodeInfo) string {
	var parts []string
	for _, n := range nodes {
		s := fmt.Sprintf("%s Ready=%s", n.Name, n.Ready)
		if n.Ready != "True" {
			s += " (" + n.ReadyMessage + ")"
		}
		if n.PodCIDR != "" {
			s += " podCIDR=" + n.PodCIDR
		}
		parts = append(parts, s)
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "no node registered"
	}
	return strings.Join(parts, "; ")
}

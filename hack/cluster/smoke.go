package main

// `smoke`: the cluster does what a user first tries. A pod on each worker serves HTTP; each
// fetches from the other by pod IP (across nodes: the pod-CIDR routes), then through a Service's
// ClusterIP (kube-proxy), and, when CoreDNS runs, resolves the Service by name; all through
// `kubectl exec` (API server -> kubelet -> crust's stream server). The namespace is removed at
// the end whatever happened.

import (
	"fmt"
	"io"
	"strings"
	"time"
)

const smokeNS = "crust-smoke"

// SmokeImage is a busybox (httpd, wget, nslookup) on the offline registry.
const SmokeImage = "docker.io/library/busybox:1.36.1"

func smokePod(name, node string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %[1]s
  namespace: %[3]s
  labels: {app: %[1]s}
spec:
  nodeName: %[2]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: %[4]s
    command: ["sh", "-c", "echo hello from %[1]s on %[2]s > /tmp/index.html && exec httpd -f -p 8080 -h /tmp"]
    ports: [{containerPort: 8080}]
    readinessProbe:
      tcpSocket: {port: 8080}
      periodSeconds: 1
---
apiVersion: v1
kind: Service
metadata:
  name: %[1]s
  namespace: %[3]s
spec:
  selector: {app: %[1]s}
  ports: [{port: 80, targetPort: 8080}]
`, name, node, smokeNS, SmokeImage)
}

// Smoke runs the checks; it fails at the first that fails.
func Smoke(c *Cluster, k Kube, out io.Writer) error {
	if c.Workers < 2 {
		return fmt.Errorf("smoke needs two workers")
	}
	defer func() {
		_, _ = k.Run("delete", "namespace", smokeNS, "--wait=true", "--timeout=60s")
	}()
	w1, w2 := c.Node(1).Name, c.Node(2).Name
	manifest := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\n", smokeNS) +
		smokePod("web-1", w1) + "---\n" + smokePod("web-2", w2)
	if _, err := runStdin(manifest, k.Kubectl, "--kubeconfig="+k.Kubeconfig, "apply", "-f", "-"); err != nil {
		return err
	}
	for _, p := range []string{"web-1", "web-2"} {
		err := waitFor("pod "+p+" Ready", 3*time.Minute, func() (bool, string, error) {
			s, err := k.Run("-n", smokeNS, "get", "pod", p, "-o",
				`jsonpath={.spec.nodeName} {.status.phase} {.status.podIP} ready={.status.conditions[?(@.type=="Ready")].status} {.status.containerStatuses[0].state}`)
			if err != nil {
				return false, err.Error(), nil
			}
			return strings.Contains(s, "ready=True"), s, nil
		})
		if err != nil {
			return err
		}
	}
	ip := func(pod string) (string, error) {
		return k.Run("-n", smokeNS, "get", "pod", pod, "-o", "jsonpath={.status.podIP}")
	}
	svcIP := func(svc string) (string, error) {
		return k.Run("-n", smokeNS, "get", "service", svc, "-o", "jsonpath={.spec.clusterIP}")
	}
	fetch := func(from, url, want string) error {
		// (Debian's busybox 1.35 wget crashes on its own -T: busybox's timeout bounds it)
		body, err := k.Run("-n", smokeNS, "exec", from, "--", "timeout", "10", "wget", "-qO-", url)
		if err != nil {
			return err
		}
		if !strings.Contains(body, want) {
			return fmt.Errorf("%s from %s: %q, not %q", url, from, body, want)
		}
		fmt.Fprintf(out, "cluster: smoke: %s -> %s: %s", from, url, body)
		return nil
	}
	for _, pair := range [][2]string{{"web-1", "web-2"}, {"web-2", "web-1"}} {
		from, to := pair[0], pair[1]
		podIP, err := ip(to)
		if err != nil {
			return err
		}
		if err := fetch(from, "http://"+podIP+":8080/", "hello from "+to); err != nil {
			return fmt.Errorf("pod IP across nodes: %w", err)
		}
		sip, err := svcIP(to)
		if err != nil {
			return err
		}
		if err := fetch(from, "http://"+sip+"/", "hello from "+to); err != nil {
			return fmt.Errorf("ClusterIP: %w", err)
		}
	}
	name := fmt.Sprintf("web-2.%s.svc.%s", smokeNS, c.DNSDomain)
	if err := fetch("web-1", "http://"+name+"/", "hello from web-2"); err != nil {
		return fmt.Errorf("DNS (is CoreDNS up? kubectl -n kube-system get pods): %w", err)
	}
	fmt.Fprintln(out, "cluster: smoke: passed")
	return nil
}

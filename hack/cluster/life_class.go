package main

// The cluster-life test's pod under a RuntimeClass whose handler an OCI runtime binary runs:
// Debian's runc, as crust's `[runtimes.runc-binary]` and as containerd's runc shim with that
// BinaryName (templates/). kubelet resolves the class through the API server and passes its
// handler with RunPodSandbox; the pod must serve, log and exec as any other, be reached over the
// pod network from another node, and (life_kill.go) keep its container while its node's runtime
// is killed and started again.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

const (
	lifeClass    = "runc-binary"
	lifeClassPod = "binary"
	lifeClassWWW = "served under " + lifeClass
)

func lifeRuntimeClass() string {
	return fmt.Sprintf("apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata: {name: %[1]s}\nhandler: %[1]s\n", lifeClass)
}

func lifeClassPodManifest(node string) string {
	script := fmt.Sprintf("echo started; mkdir -p /www && echo %q > /www/index.html && exec httpd -f -p 8080 -h /www", lifeClassWWW)
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: %[3]s}
spec:
  nodeName: %[2]s
  runtimeClassName: %[4]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %[5]s
    command: ["sh", "-c", %[6]q]
    # Ready once httpd serves the page the script wrote: what the test reads is there.
    readinessProbe:
      httpGet: {path: /, port: 8080}
      periodSeconds: 1
`, lifeClassPod, node, lifeNS, lifeClass, SmokeImage, script)
}

// runtimeClass runs the pod on the first worker (the one whose runtime the kill step kills).
func (l *Life) runtimeClass() error {
	w1 := l.worker(1)
	if err := l.apply(lifeRuntimeClass() + "---\n" + lifeClassPodManifest(w1)); err != nil {
		return err
	}
	if _, err := l.kubectl("wait", "--for=condition=Ready", "pod/"+lifeClassPod, "--timeout=3m"); err != nil {
		return err
	}
	if err := l.classPodServes(); err != nil {
		return err
	}
	if logs, err := l.kubectl("logs", lifeClassPod); err != nil {
		return err
	} else if strings.TrimSpace(logs) != "started" {
		return fmt.Errorf("kubectl logs %s: %q, want \"started\"", lifeClassPod, logs)
	}
	// From a pod on the other worker, by the pod's own address.
	ip, err := l.kubectl("get", "pod", lifeClassPod, "-o", "jsonpath={.status.podIP}")
	if err != nil {
		return err
	}
	from, err := l.aWebPod(l.worker(2))
	if err != nil {
		return err
	}
	// timeout(1), not wget's -T: Debian 12's busybox wget crashes (SIGSEGV) with -T.
	got, err := l.kubectl("exec", from, "--", "sh", "-c", "timeout 10 wget -qO- http://"+ip+":8080/")
	if err != nil {
		return err
	}
	if strings.TrimSpace(got) != lifeClassWWW {
		return fmt.Errorf("%s from %s on %s: %q", ip, from, l.worker(2), got)
	}
	return l.ranByTheBinary(l.C.Node(1))
}

// classPodServes execs in the pod (after the kill too): its page is there.
func (l *Life) classPodServes() error {
	out, err := l.kubectl("exec", lifeClassPod, "--", "cat", "/www/index.html")
	if err != nil {
		return err
	}
	if strings.TrimSpace(out) != lifeClassWWW {
		return fmt.Errorf("exec in %s: /www/index.html holds %q", lifeClassPod, out)
	}
	return nil
}

// ranByTheBinary checks, on a crust node, that the container is the binary's: crust keeps the
// state of each container a binary runs under <state>/runtimes/<handler>/<id>, the binary's
// --root. containerd runs every pod through runc, so there is nothing to tell apart there.
func (l *Life) ranByTheBinary(n *Node) error {
	if l.C.Runtime != "crust" {
		return nil
	}
	pods, err := l.pods("")
	if err != nil {
		return err
	}
	for _, p := range pods {
		if p.Name != lifeClassPod {
			continue
		}
		id := strings.TrimPrefix(p.ContainerID, "crust://")
		dir := filepath.Join(n.CrustState(), "runtimes", lifeClass, id)
		if _, err := os.Stat(dir); err != nil {
			return fmt.Errorf("container %s of pod %s: no state of the binary's: %w", id, lifeClassPod, err)
		}
		fmt.Fprintf(l.Out, "cluster: life: pod %s runs under %s (its state in %s)\n", lifeClassPod, lifeClass, dir)
		return nil
	}
	return fmt.Errorf("no pod %s", lifeClassPod)
}

package main

// `life`: a cluster's life beyond the conformance suite, as its users live it. A Deployment of
// 20 replicas spread over the workers behind a Service, reached by name from a pod on another
// node; kubectl exec, logs -f, port-forward and cp through the API server; a pod under a
// RuntimeClass whose handler is another OCI runtime (life_class.go); a rolling update; a
// worker drained and uncordoned; and one worker's runtime (crust) SIGKILLed in the middle of a
// rollout and started again (life_kill.go), after which no running container may have
// restarted or changed, the rollout completes and the node never left Ready. Each step fails
// naming what it saw. The namespace is removed at the end whatever happened.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

const (
	lifeNS       = "crust-life"
	lifeReplicas = 20
)

// Life is one run of the test; client and ticker are bare pods on the first worker, the
// Deployment's pods spread over every worker.
type Life struct {
	C   *Cluster
	B   Binaries
	K   Kube
	Out io.Writer
}

func lifeDeployment(version int) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: %[1]s}
spec:
  replicas: %[2]d
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      # Spread evenly over the nodes the pods may go to (a cordoned or tainted node does not
      # count), per ReplicaSet.
      topologySpreadConstraints:
      - maxSkew: 1
        topologyKey: kubernetes.io/hostname
        whenUnsatisfiable: DoNotSchedule
        nodeTaintsPolicy: Honor
        labelSelector: {matchLabels: {app: web}}
        matchLabelKeys: [pod-template-hash]
      containers:
      - name: web
        image: %[3]s
        env:
        - {name: VERSION, value: "%[4]d"}
        - name: NODE
          valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
        command: ["sh", "-c", "mkdir -p /www && echo \"$HOSTNAME $NODE v$VERSION\" > /www/index.html && exec httpd -f -p 8080 -h /www"]
        ports: [{containerPort: 8080}]
        readinessProbe:
          httpGet: {path: /, port: 8080}
          periodSeconds: 1
        resources: {requests: {cpu: 5m, memory: 8Mi}}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: %[1]s}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`, lifeNS, lifeReplicas, SmokeImage, version)
}

func lifeBarePod(name, node, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: %[3]s}
spec:
  nodeName: %[2]s
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %[4]s
    command: ["sh", "-c", %[5]q]
`, name, node, lifeNS, SmokeImage, script)
}

// Run runs every step in order; it fails at the first that fails.
func (l *Life) Run() error {
	if l.C.Workers < 2 {
		return fmt.Errorf("life needs two workers")
	}
	defer func() {
		_, _ = l.K.Run("delete", "namespace", lifeNS, "--wait=true", "--timeout=120s")
		_, _ = l.K.Run("delete", "runtimeclass", lifeClass, "--ignore-not-found")
	}()
	steps := []step{
		{"a Deployment of 20 replicas spread over the workers", l.deploy},
		{"the Service by name from a pod on another node", l.serviceByName},
		{"kubectl exec", l.exec},
		{"kubectl logs -f", l.logsFollow},
		{"kubectl port-forward", l.portForward},
		{"kubectl cp", l.copy},
		{"a pod under a RuntimeClass an OCI runtime binary runs", l.runtimeClass},
		{"a rolling update", l.rollingUpdate},
		{"a worker drained and uncordoned", l.drain},
		{"a worker's runtime SIGKILLed and started again mid-rollout", l.runtimeKilled},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.run(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(l.Out, "cluster: life: %s: passed in %.1fs\n", s.name, time.Since(start).Seconds())
	}
	fmt.Fprintln(l.Out, "cluster: life: passed")
	return nil
}

func (l *Life) kubectl(args ...string) (string, error) {
	return l.K.Run(append([]string{"-n", lifeNS}, args...)...)
}

func (l *Life) apply(manifest string) error {
	_, err := runStdin(manifest, l.K.Kubectl, "--kubeconfig="+l.K.Kubeconfig, "apply", "-f", "-")
	return err
}

func (l *Life) worker(i int) string { return l.C.Node(i).Name }

func (l *Life) deploy() error {
	ns := fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\n", lifeNS)
	if err := l.apply(ns + lifeDeployment(1)); err != nil {
		return err
	}
	// The client and the ticker stay on the first worker through every step: the drain takes the
	// second, and the first's crust is the one killed.
	w1 := l.worker(1)
	if err := l.apply(lifeBarePod("client", w1, "exec sleep 100000") + "---\n" +
		lifeBarePod("ticker", w1, "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done")); err != nil {
		return err
	}
	if err := l.rolledOut(); err != nil {
		return err
	}
	for _, p := range []string{"client", "ticker"} {
		if err := l.waitRunning(p); err != nil {
			return err
		}
	}
	return l.spread(l.worker(1), l.worker(2))
}

func (l *Life) rolledOut() error {
	_, err := l.kubectl("rollout", "status", "deployment/web", "--timeout=5m")
	return err
}

func (l *Life) waitRunning(pod string) error {
	return waitFor("pod "+pod+" Running", 3*time.Minute, func() (bool, string, error) {
		s, err := l.kubectl("get", "pod", pod, "-o", "jsonpath={.status.phase}")
		return s == "Running", s, err
	})
}

// lifePod is what the test needs of a pod.
type lifePod struct {
	Name, Node, Phase string
	Ready             bool
	Restarts          int
	ContainerID       string
}

func (l *Life) pods(selector string) ([]lifePod, error) {
	args := []string{"get", "pods", "-o", "json"}
	if selector != "" {
		args = append(args, "-l", selector)
	}
	out, err := l.kubectl(args...)
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name              string
				DeletionTimestamp *string
			}
			Spec   struct{ NodeName string }
			Status struct {
				Phase             string
				ContainerStatuses []struct {
					Ready        bool
					RestartCount int
					ContainerID  string
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		return nil, err
	}
	var pods []lifePod
	for _, it := range list.Items {
		if it.Metadata.DeletionTimestamp != nil {
			continue
		}
		p := lifePod{Name: it.Metadata.Name, Node: it.Spec.NodeName, Phase: it.Status.Phase}
		for _, cs := range it.Status.ContainerStatuses {
			p.Ready, p.Restarts, p.ContainerID = cs.Ready, cs.RestartCount, cs.ContainerID
		}
		pods = append(pods, p)
	}
	return pods, nil
}

// spread checks that the Deployment's ready pods are all on the given nodes, each with its
// share (the spread allows a skew of one).
func (l *Life) spread(nodes ...string) error {
	pods, err := l.pods("app=web")
	if err != nil {
		return err
	}
	count := map[string]int{}
	ready := 0
	for _, p := range pods {
		if p.Ready {
			ready++
			count[p.Node]++
		}
	}
	if ready != lifeReplicas {
		return fmt.Errorf("%d of %d pods ready: %v", ready, lifeReplicas, count)
	}
	least := lifeReplicas/len(nodes) - 1
	for _, n := range nodes {
		if count[n] < least {
			return fmt.Errorf("%s has %d pods, fewer than %d: %v", n, count[n], least, count)
		}
	}
	if len(count) != len(nodes) {
		return fmt.Errorf("pods on %v, not only on %v", count, nodes)
	}
	fmt.Fprintf(l.Out, "cluster: life: the Deployment's pods per node: %v\n", count)
	return nil
}

// answers asks the Service by its DNS name n times from the client and returns the answers
// ("<pod> <node> v<version>" lines).
func (l *Life) answers(n int) ([]string, error) {
	url := fmt.Sprintf("http://web.%s.svc.%s/", lifeNS, l.C.DNSDomain)
	script := fmt.Sprintf("for i in $(seq %d); do timeout 10 wget -qO- %s || echo FAILED; done", n, url)
	out, err := l.kubectl("exec", "client", "--", "sh", "-c", script)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	for _, line := range lines {
		if len(strings.Fields(line)) != 3 {
			return nil, fmt.Errorf("%s answered %q", url, line)
		}
	}
	return lines, nil
}

func (l *Life) serviceByName() error {
	lines, err := l.answers(40)
	if err != nil {
		return err
	}
	byNode := map[string]int{}
	for _, line := range lines {
		byNode[strings.Fields(line)[1]]++
	}
	// From the first worker: pods on the second must have answered, through kube-proxy and the
	// routes between the nodes.
	if byNode[l.worker(2)] == 0 || byNode[l.worker(1)] == 0 {
		return fmt.Errorf("40 requests were answered by pods on %v only", byNode)
	}
	fmt.Fprintf(l.Out, "cluster: life: 40 requests from %s answered by pods on %v\n", l.worker(1), byNode)
	return nil
}

func (l *Life) aWebPod(node string) (string, error) {
	pods, err := l.pods("app=web")
	if err != nil {
		return "", err
	}
	for _, p := range pods {
		if p.Node == node && p.Ready {
			return p.Name, nil
		}
	}
	return "", fmt.Errorf("no ready pod of the Deployment on %s", node)
}

func (l *Life) exec() error {
	pod, err := l.aWebPod(l.worker(2))
	if err != nil {
		return err
	}
	if out, err := l.kubectl("exec", pod, "--", "sh", "-c", "echo $HOSTNAME"); err != nil {
		return err
	} else if strings.TrimSpace(out) != pod {
		return fmt.Errorf("exec in %s printed %q", pod, out)
	}
	const in = "through stdin and back\n"
	out, err := runStdin(in, l.K.Kubectl, "--kubeconfig="+l.K.Kubeconfig, "-n", lifeNS, "exec", "-i", pod, "--", "cat")
	if err != nil {
		return err
	}
	if out != in {
		return fmt.Errorf("exec -i %s -- cat gave back %q for %q", pod, out, in)
	}
	// kubectl exits with the command's status.
	_, err = l.kubectl("exec", pod, "--", "sh", "-c", "exit 7")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 7 {
		return fmt.Errorf("exec of `exit 7` in %s: want exit status 7, got %v", pod, err)
	}
	return nil
}

// kubectlStream starts a kubectl that runs until stopped (logs -f, port-forward): its output
// as it comes, its errors once it ends, and the stop.
func (l *Life) kubectlStream(args ...string) (io.Reader, *bytes.Buffer, func(), error) {
	cmd := exec.Command(l.K.Kubectl, append([]string{"--kubeconfig=" + l.K.Kubeconfig, "-n", lifeNS}, args...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, nil, err
	}
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, nil, err
	}
	return stdout, stderr, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
}

var tickLine = regexp.MustCompile(`^tick (\d+)$`)

func (l *Life) lastTick() (int, error) {
	out, err := l.kubectl("logs", "ticker", "--tail=1")
	if err != nil {
		return 0, err
	}
	m := tickLine.FindStringSubmatch(strings.TrimSpace(out))
	if m == nil {
		return 0, fmt.Errorf("the ticker's last line is %q", out)
	}
	return strconv.Atoi(m[1])
}

// logsFollow follows the ticker's log until ten lines written after the follow began arrive.
func (l *Life) logsFollow() error {
	before, err := l.lastTick()
	if err != nil {
		return err
	}
	stdout, stderr, stop, err := l.kubectlStream("logs", "-f", "ticker")
	if err != nil {
		return err
	}
	defer stop()
	got := make(chan int)
	go func() {
		defer close(got)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := tickLine.FindStringSubmatch(sc.Text()); m != nil {
				n, _ := strconv.Atoi(m[1])
				got <- n
			}
		}
	}()
	want, last := before+10, 0
	timeout := time.After(30 * time.Second)
	for last < want {
		select {
		case n, ok := <-got:
			if !ok {
				return fmt.Errorf("kubectl logs -f ended at tick %d (waiting for %d): %s", last, want, stderr.String())
			}
			last = n
		case <-timeout:
			return fmt.Errorf("kubectl logs -f: tick %d after 30s, waiting for %d", last, want)
		}
	}
	return nil
}

var forwarding = regexp.MustCompile(`Forwarding from 127\.0\.0\.1:(\d+) -> 8080`)

func (l *Life) portForward() error {
	pod, err := l.aWebPod(l.worker(2))
	if err != nil {
		return err
	}
	stdout, stderr, stop, err := l.kubectlStream("port-forward", "--address=127.0.0.1", "pod/"+pod, ":8080")
	if err != nil {
		return err
	}
	defer stop()
	port := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := forwarding.FindStringSubmatch(sc.Text()); m != nil {
				port <- m[1]
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	var p string
	select {
	case p = <-port:
	case <-time.After(30 * time.Second):
		return fmt.Errorf("kubectl port-forward printed no local port in 30s: %s", stderr.String())
	}
	// Several connections, each a stream of its own through the API server, kubelet and crust.
	client := &http.Client{Timeout: 10 * time.Second}
	for i := 0; i < 5; i++ {
		resp, err := client.Get("http://127.0.0.1:" + p + "/")
		if err != nil {
			return fmt.Errorf("GET through the forward (%s): %w", stderr.String(), err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.HasPrefix(string(body), pod+" ") {
			return fmt.Errorf("GET through the forward to %s: %q", pod, body)
		}
	}
	return nil
}

func (l *Life) copy() error {
	pod, err := l.aWebPod(l.worker(2))
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "crust-life-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	data := make([]byte, 1<<20)
	if _, err := rand.Read(data); err != nil {
		return err
	}
	src, back := filepath.Join(dir, "blob"), filepath.Join(dir, "back")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		return err
	}
	if _, err := l.kubectl("cp", src, pod+":/tmp/blob"); err != nil {
		return err
	}
	sum, err := l.kubectl("exec", pod, "--", "sha256sum", "/tmp/blob")
	if err != nil {
		return err
	}
	if want := fmt.Sprintf("%x", sha256.Sum256(data)); !strings.HasPrefix(sum, want) {
		return fmt.Errorf("the copy in %s has sha256 %q, not %s", pod, sum, want)
	}
	if _, err := l.kubectl("cp", pod+":/tmp/blob", back); err != nil {
		return err
	}
	got, err := os.ReadFile(back)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, data) {
		return fmt.Errorf("the file copied back from %s differs (%d bytes, sent %d)", pod, len(got), len(data))
	}
	return nil
}

// versionServed waits until every answer of the Service comes from the given version: the
// old pods, terminating when the rollout is complete, leave the Service's endpoints and then
// kube-proxy's rules a moment later.
func (l *Life) versionServed(version int) error {
	return waitFor(fmt.Sprintf("the Service answering from v%d only", version), time.Minute, func() (bool, string, error) {
		lines, err := l.answers(20)
		if err != nil {
			return false, "", err
		}
		for _, line := range lines {
			if !strings.HasSuffix(line, fmt.Sprintf(" v%d", version)) {
				return false, "answered " + line, nil
			}
		}
		return true, "", nil
	})
}

func (l *Life) setVersion(v int) error {
	_, err := l.kubectl("set", "env", "deployment/web", fmt.Sprintf("VERSION=%d", v))
	return err
}

// noRestarts fails when a pod of the namespace restarted a container.
func (l *Life) noRestarts() error {
	pods, err := l.pods("")
	if err != nil {
		return err
	}
	for _, p := range pods {
		if p.Restarts != 0 {
			return fmt.Errorf("pod %s on %s restarted its container %d times", p.Name, p.Node, p.Restarts)
		}
	}
	return nil
}

func (l *Life) rollingUpdate() error {
	if err := l.setVersion(2); err != nil {
		return err
	}
	if err := l.rolledOut(); err != nil {
		return err
	}
	if err := l.versionServed(2); err != nil {
		return err
	}
	if err := l.spread(l.worker(1), l.worker(2)); err != nil {
		return err
	}
	return l.noRestarts()
}

func (l *Life) drain() error {
	w2 := l.worker(2)
	if _, err := l.K.Run("drain", w2, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3m"); err != nil {
		return err
	}
	err := waitFor("the Deployment's pods all on "+l.worker(1), 3*time.Minute, func() (bool, string, error) {
		err := l.spread(l.worker(1))
		if err != nil {
			return false, err.Error(), nil
		}
		return true, "", nil
	})
	if err != nil {
		return err
	}
	if _, err := l.K.Run("uncordon", w2); err != nil {
		return err
	}
	// Back on the uncordoned node with the next rollout.
	if _, err := l.kubectl("rollout", "restart", "deployment/web"); err != nil {
		return err
	}
	if err := l.rolledOut(); err != nil {
		return err
	}
	return l.spread(l.worker(1), l.worker(2))
}

package main

// The cluster-life test's last step: a worker's runtime killed mid-rollout and started again
// (life.go has the rest).

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// nodeWatch records every state but Ready=True that a node's Ready condition shows while it
// runs.
type nodeWatch struct {
	stop   chan struct{}
	done   sync.WaitGroup
	mu     sync.Mutex
	states []string
}

func (l *Life) watchNode(name string) *nodeWatch {
	w := &nodeWatch{stop: make(chan struct{})}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		for {
			s, err := l.K.Run("get", "node", name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].message}`)
			if err == nil && !strings.HasPrefix(s, "True ") {
				w.mu.Lock()
				w.states = append(w.states, time.Now().Format("15:04:05.000")+" "+s)
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(pollInterval):
			}
		}
	}()
	return w
}

func (w *nodeWatch) end() []string {
	close(w.stop)
	w.done.Wait()
	return w.states
}

// runtimeKilled kills the first worker's runtime (crust) with SIGKILL while a rollout replaces
// pods on it, starts it again as a supervisor would, and checks that the node and its pods went
// on as if nothing happened.
func (l *Life) runtimeKilled() error {
	n := l.C.Node(1)
	watch := l.watchNode(n.Name)
	before, err := l.killMidRollout(n)
	states := watch.end()
	if err != nil {
		return err
	}
	if len(states) > 0 {
		return fmt.Errorf("%s left Ready: %s", n.Name, strings.Join(states, "; "))
	}
	return l.afterKill(before)
}

// killMidRollout starts a rollout, kills the node's runtime once it is under way, starts the
// runtime again and waits for the rollout to complete; it returns the pods as they were at the
// kill.
func (l *Life) killMidRollout(n *Node) ([]lifePod, error) {
	rt := RuntimeProc(n, l.B)
	if err := l.setVersion(3); err != nil {
		return nil, err
	}
	// Mid-rollout: some pods of the new version exist, not all.
	err := waitFor("the rollout to v3 under way", 2*time.Minute, func() (bool, string, error) {
		s, err := l.kubectl("get", "deployment", "web", "-o", "jsonpath={.status.updatedReplicas}")
		if err != nil {
			return false, "", err
		}
		n, _ := strconv.Atoi(s)
		return n >= 2 && n < lifeReplicas, "updatedReplicas=" + s, nil
	})
	if err != nil {
		return nil, err
	}
	// The pods whose containers run at the kill, to compare with after it.
	before, err := l.pods("")
	if err != nil {
		return nil, err
	}
	// As an operator's kill -9 of the daemon, or a unit's restart (crust.service kills crust
	// alone, KillMode=process): the pod monitors live on.
	pids, err := rt.Pids()
	if err == nil && len(pids) != 1 {
		err = fmt.Errorf("%d processes of %s in %s, not one", len(pids), rt.Name, rt.Cgroup)
	}
	if err == nil {
		err = syscall.Kill(pids[0], syscall.SIGKILL)
	}
	if err != nil {
		return nil, err
	}
	err = waitFor(rt.Name+" of "+n.Name+" gone", 10*time.Second, func() (bool, string, error) {
		return !rt.Running(), "still running", nil
	})
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(l.Out, "cluster: life: %s of %s killed (SIGKILL) mid-rollout; starting it again\n", rt.Name, n.Name)
	if err := rt.Start(); err != nil {
		return nil, err
	}
	err = waitFor(rt.Name+" of "+n.Name+" answering again", time.Minute, func() (bool, string, error) {
		return runtimeAnswers(n), "no answer on the socket", alive(rt)
	})
	if err != nil {
		return nil, err
	}
	return before, l.rolledOut()
}

// afterKill checks the pods after the runtime's restart: every pod whose container ran at the
// kill and that the rollout kept (the bare pods always, the RuntimeClass's among them) has that
// same container, never restarted; the rollout reached every pod; the ticker's log goes on. A pod whose container
// was being created at the kill may have been retried (kubelet counts the retry as a restart):
// such pods are named, not failed.
func (l *Life) afterKill(before []lifePod) error {
	after, err := l.pods("")
	if err != nil {
		return err
	}
	now := map[string]lifePod{}
	for _, p := range after {
		now[p.Name] = p
	}
	ran := map[string]bool{}
	for _, p := range before {
		if p.Phase != "Running" || !p.Ready || p.ContainerID == "" {
			continue
		}
		ran[p.Name] = true
		q, ok := now[p.Name]
		bare := p.Name == "client" || p.Name == "ticker" || p.Name == lifeClassPod
		if !ok && !bare {
			continue // an old pod the rollout replaced
		}
		if !ok || q.Phase != "Running" || q.ContainerID != p.ContainerID || q.Restarts != 0 {
			return fmt.Errorf("pod %s ran %s at the kill; after it: %+v", p.Name, p.ContainerID, q)
		}
	}
	for _, q := range after {
		if !ran[q.Name] && q.Restarts != 0 {
			fmt.Fprintf(l.Out, "cluster: life: pod %s, starting at the kill, was retried (restarts: %d)\n", q.Name, q.Restarts)
		}
	}
	if err := l.versionServed(3); err != nil {
		return err
	}
	// The container the binary runs is still crust's to exec in.
	if err := l.classPodServes(); err != nil {
		return err
	}
	if err := l.spread(l.worker(1), l.worker(2)); err != nil {
		return err
	}
	// The ticker's log goes on (crust's monitor, or containerd's shim, wrote it while the
	// runtime was down and after).
	t1, err := l.lastTick()
	if err != nil {
		return err
	}
	return waitFor("the ticker's log past tick "+strconv.Itoa(t1), 10*time.Second, func() (bool, string, error) {
		t2, err := l.lastTick()
		return t2 > t1, "tick " + strconv.Itoa(t2), err
	})
}

package main

// The cluster's processes: each one started detached (a session of its own, so `up` may exit),
// in a cgroup of its own under /crust-<cluster>, in its node's network namespace but in the
// host's mount namespace (nsenter --net, not `ip netns exec`, which would give it a mount
// namespace of its own, and kubelet's volume mounts would be invisible to crust). `down` ends
// them by their cgroups, with no record of what was started.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Proc is one process of the cluster.
type Proc struct {
	Name   string   // component name: the log file's and cgroup's
	Node   *Node    // whose network namespace and cgroup root
	Argv   []string // the binary's absolute path first
	Env    []string // added to the harness's environment
	Log    string   // where its output goes (appended)
	Cgroup string
}

// NodeProc is a component of a node: its cgroup beside the node's kubepods, its log in the
// node's log directory.
func NodeProc(n *Node, name string, argv ...string) Proc {
	return Proc{Name: name, Node: n, Argv: argv, Log: filepath.Join(n.LogDir(), name+".log"),
		Cgroup: n.Cgroup(name)}
}

// Start starts the process through `cluster enter`, which moves itself into the cgroup before
// it execs nsenter, so that nothing the process starts escapes the cgroup.
func (p Proc) Start() error {
	if err := makeCgroup(p.Cgroup); err != nil {
		return fmt.Errorf("%s: cgroup %s: %w", p.Name, p.Cgroup, err)
	}
	if err := os.MkdirAll(filepath.Dir(p.Log), 0o755); err != nil {
		return err
	}
	log, err := os.OpenFile(p.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	self, err := os.Executable()
	if err != nil {
		return err
	}
	args := []string{"enter", "--cgroup", p.Cgroup, "--netns", p.Node.NetnsPath(), "--"}
	cmd := exec.Command(self, append(args, p.Argv...)...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), p.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	fmt.Fprintf(log, "--- %s: %s\n", p.Name, strings.Join(p.Argv, " "))
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.Name, err)
	}
	// Started means the component runs (the same process, once enter and nsenter have
	// exec'd), so that a later check that it still runs means something.
	pid := cmd.Process.Pid
	deadline := time.Now().Add(10 * time.Second)
	for {
		var ws syscall.WaitStatus
		if wpid, _ := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil); wpid == pid {
			return fmt.Errorf("%s of %s exited at once (%v); the end of %s:\n%s", p.Name, p.Node.Name,
				exitText(ws), p.Log, p.LogTail(15))
		}
		if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err == nil && exe == p.Argv[0] {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s of %s: not running %s after 10s", p.Name, p.Node.Name, p.Argv[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func exitText(ws syscall.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return fmt.Sprintf("status %d", ws.ExitStatus())
}

// Running tells whether the component runs in its cgroup.
func (p Proc) Running() bool {
	pids, _ := p.Pids()
	return len(pids) > 0
}

// Pids are the processes in the component's cgroup that run its binary with its arguments:
// the component itself, not what it started from its own executable (crust's pod monitors stay
// in crust's cgroup in the hierarchies crust does not manage, name=systemd and a hybrid host's
// unified one, as containerd's shims stay in containerd's).
func (p Proc) Pids() ([]int, error) {
	pids, err := cgroupPids(p.Cgroup)
	if err != nil {
		return nil, err
	}
	var found []int
	for _, pid := range pids {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil || exe != p.Argv[0] {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		// The arguments the harness knows (none for a static pod's) begin the command line.
		args := strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")[1:]
		if len(args) >= len(p.Argv)-1 && slices.Equal(args[:len(p.Argv)-1], p.Argv[1:]) {
			found = append(found, pid)
		}
	}
	return found, nil
}

// cgroupHolds names the processes in the component's cgroup (pid and executable), for an
// error message.
func (p Proc) cgroupHolds() string {
	pids, err := cgroupPids(p.Cgroup)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	if len(pids) == 0 {
		return "no process"
	}
	var held []string
	for _, pid := range pids {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			exe = "(" + err.Error() + ")"
		}
		held = append(held, fmt.Sprintf("%d %s", pid, exe))
	}
	return strings.Join(held, ", ")
}

// LogTail is the end of the process's log, for an error message.
func (p Proc) LogTail(lines int) string { return tail(p.Log, lines) }

// tail is the end of a file; a pattern names the last file it matches.
func tail(path string, lines int) string {
	if strings.Contains(path, "*") {
		matches, _ := filepath.Glob(path)
		if len(matches) == 0 {
			return fmt.Sprintf("(no log matches %s yet)", path)
		}
		path = matches[len(matches)-1]
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// enter is the `cluster enter --cgroup C --netns PATH -- argv...` subcommand Start runs: it
// joins the cgroup, then becomes nsenter, which becomes the component.
func enter(args []string) error {
	var cgroup, netns string
	for len(args) > 0 && args[0] != "--" {
		if len(args) < 2 {
			return errors.New("enter: --cgroup C --netns PATH -- argv...")
		}
		switch args[0] {
		case "--cgroup":
			cgroup = args[1]
		case "--netns":
			netns = args[1]
		default:
			return fmt.Errorf("enter: unknown flag %s", args[0])
		}
		args = args[2:]
	}
	if len(args) < 2 || cgroup == "" || netns == "" {
		return errors.New("enter: --cgroup C --netns PATH -- argv...")
	}
	if err := joinCgroup(cgroup, os.Getpid()); err != nil {
		return err
	}
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		return err
	}
	return syscall.Exec(nsenter, append([]string{"nsenter", "--net=" + netns, "--"}, args[1:]...), os.Environ())
}

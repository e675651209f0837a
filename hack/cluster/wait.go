package main

// Waiting on a condition with a deadline: a timeout fails naming what was awaited and the last
// state seen, and a check may fail at once (a process that died) rather than wait out the
// deadline.

import (
	"fmt"
	"time"
)

const pollInterval = 500 * time.Millisecond

// waitFor polls check until it reports done, fails, or the deadline passes.
func waitFor(what string, timeout time.Duration, check func() (done bool, state string, err error)) error {
	deadline := time.Now().Add(timeout)
	state := "not checked yet"
	for {
		done, s, err := check()
		if s != "" {
			state = s
		}
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not after %s; last seen: %s", what, timeout, state)
		}
		time.Sleep(pollInterval)
	}
}

// alive fails when one of the processes has exited, with what its cgroup still holds and the
// end of its log; a cgroup that cannot be read fails with that error, not as an exit.
func alive(procs ...Proc) error {
	for _, p := range procs {
		pids, err := p.Pids()
		if err != nil {
			return fmt.Errorf("%s of %s: reading its cgroup %s: %w", p.Name, p.Node.Name, p.Cgroup, err)
		}
		if len(pids) == 0 {
			return fmt.Errorf("%s of %s exited (no process of %s with its arguments in %s, which holds %s); the end of %s:\n%s",
				p.Name, p.Node.Name, p.Argv[0], p.Cgroup, p.cgroupHolds(), p.Log, p.LogTail(25))
		}
	}
	return nil
}

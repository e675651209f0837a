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

// alive fails when one of the processes has exited, with the end of its log.
func alive(procs ...Proc) error {
	for _, p := range procs {
		if !p.Running() {
			return fmt.Errorf("%s of %s exited; the end of %s:\n%s", p.Name, p.Node.Name, p.Log, p.LogTail(25))
		}
	}
	return nil
}

package main

// Running commands: an error names the command and carries what it printed.

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// RunError is a command that failed, with its output.
type RunError struct {
	Cmd    []string
	Output string
	Err    error
}

// Unwrap is the command's own error (an *exec.ExitError holds its exit status).
func (e *RunError) Unwrap() error { return e.Err }

func (e *RunError) Error() string {
	out := strings.TrimSpace(e.Output)
	if out == "" {
		return fmt.Sprintf("%s: %v", strings.Join(e.Cmd, " "), e.Err)
	}
	return fmt.Sprintf("%s: %v: %s", strings.Join(e.Cmd, " "), e.Err, out)
}

// run runs a command and returns its standard output; the error holds both streams.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &RunError{Cmd: append([]string{name}, args...),
			Output: stdout.String() + stderr.String(), Err: err}
	}
	return stdout.String(), nil
}

// runIn runs a command in a node's network namespace (and the host's mount namespace).
func runIn(n *Node, name string, args ...string) (string, error) {
	return run("nsenter", append([]string{"--net=" + n.NetnsPath(), "--", name}, args...)...)
}

// runStdin is run with the given standard input.
func runStdin(stdin, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), &RunError{Cmd: append([]string{name}, args...),
			Output: stdout.String() + stderr.String(), Err: err}
	}
	return stdout.String(), nil
}

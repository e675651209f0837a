package main

// Reaching a node's own loopback from the host: a connection dialled from a thread moved into
// the node's network namespace for the dial (the socket stays in the namespace it was made in).

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime"
	"syscall"
	"time"
)

// sysSetns is setns(2) on amd64 (the syscall package names no SYS_SETNS there).
const sysSetns = 308

func setns(f *os.File) error {
	if _, _, e := syscall.RawSyscall(sysSetns, f.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
		return e
	}
	return nil
}

// dialIn dials addr from inside the network namespace at nsPath.
func dialIn(ctx context.Context, nsPath, network, addr string) (net.Conn, error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := setns(target); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("entering %s: %w", nsPath, err)
	}
	var d net.Dialer
	conn, dialErr := d.DialContext(ctx, network, addr)
	if err := setns(orig); err != nil {
		// The thread stays locked, and so ends with this goroutine: no other goroutine may run
		// in the node's namespace.
		return nil, fmt.Errorf("leaving %s: %w", nsPath, err)
	}
	runtime.UnlockOSThread()
	return conn, dialErr
}

// getIn fetches url (http or https, not verified: a health endpoint on the node's loopback)
// from inside the node's network namespace; it returns the status and body.
func getIn(n *Node, url string) (int, string, error) {
	client := &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialIn(ctx, n.NetnsPath(), network, addr)
			},
			TLSClientConfig:   &tls.Config{InsecureSkipVerify: true},
			DisableKeepAlives: true,
		},
	}
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	return resp.StatusCode, string(b), nil
}

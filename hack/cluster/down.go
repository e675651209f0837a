package main

// `down`: finds everything of the cluster by its name and removes it, with no record of what
// `up` did, so it works after a crash, after a failed `up`, and twice in a row:
//   1. every process in the cluster's cgroups (/crust-<cluster> in every hierarchy: the
//      control plane, each node's crust, kubelet and kube-proxy, every container and monitor),
//      SIGTERM, then SIGKILL (thawing frozen cgroups first);
//   2. every mount under the cluster's directories (volumes, root filesystems, namespace pins);
//   3. the cgroups; 4. the network (namespaces, links, host rules); 5. the directories, and
//   kubelet's links in /var/log/containers to them.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Down takes the cluster down; it reports what it could not remove.
func Down(c *Cluster, out io.Writer) error {
	var errs []error
	if err := stopProcesses(c, out); err != nil {
		errs = append(errs, err)
	}
	if err := unmountAll(c); err != nil {
		errs = append(errs, err)
	}
	if cgroupExists(c.CgroupBase()) {
		if err := removeCgroup(c.CgroupBase()); err != nil {
			errs = append(errs, fmt.Errorf("cgroups: %w", err))
		}
	}
	if err := TeardownNetwork(c); err != nil {
		errs = append(errs, fmt.Errorf("network: %w", err))
	}
	removeLogLinks(c)
	if ms := clusterMounts(c); len(ms) > 0 {
		// Never remove a tree with something mounted in it.
		errs = append(errs, fmt.Errorf("still mounted, directories kept: %s", strings.Join(ms, " ")))
	} else {
		for _, d := range []string{c.RunDir, c.BaseDir} {
			if err := os.RemoveAll(d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if left := leftovers(c); len(left) > 0 {
		errs = append(errs, fmt.Errorf("left behind: %s", strings.Join(left, "; ")))
	}
	return errors.Join(errs...)
}

func stopProcesses(c *Cluster, out io.Writer) error {
	base := c.CgroupBase()
	if !cgroupExists(base) {
		return nil
	}
	thaw(base)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		pids, err := cgroupPids(base)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		fmt.Fprintf(out, "cluster: down: %s to %d processes\n", sig, len(pids))
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
		err = waitFor("the cluster's processes to exit", 15*time.Second, func() (bool, string, error) {
			left, err := cgroupPids(base)
			return len(left) == 0, fmt.Sprintf("%d left: %s", len(left), describePids(left)), err
		})
		if err == nil {
			return nil
		}
		if sig == syscall.SIGKILL {
			return err
		}
	}
	return nil
}

// thaw thaws every frozen cgroup of the cluster (a frozen process takes no signal).
func thaw(base string) {
	root := filepath.Join(cgroupFS, "freezer", base)
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.WriteFile(filepath.Join(p, "freezer.state"), []byte("THAWED"), 0o644)
		}
		return nil
	})
}

func describePids(pids []int) string {
	var parts []string
	for i, pid := range pids {
		if i == 8 {
			parts = append(parts, "...")
			break
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		parts = append(parts, fmt.Sprintf("%d (%s)", pid, strings.TrimSpace(string(comm))))
	}
	return strings.Join(parts, ", ")
}

// clusterMounts lists the mount points under the cluster's directories, deepest first.
func clusterMounts(c *Cluster) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var ms []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMount(fields[4])
		for _, d := range []string{c.BaseDir, c.RunDir} {
			if mp == d || strings.HasPrefix(mp, d+"/") {
				ms = append(ms, mp)
			}
		}
	}
	sort.Slice(ms, func(i, j int) bool { return strings.Count(ms[i], "/") > strings.Count(ms[j], "/") })
	return ms
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountAll detaches every mount under the cluster's directories, deepest first, until none
// is left (a mount may be stacked, or shown again once the one over it is gone).
func unmountAll(c *Cluster) error {
	for round := 0; round < 10; round++ {
		ms := clusterMounts(c)
		if len(ms) == 0 {
			return nil
		}
		for _, m := range ms {
			_ = syscall.Unmount(m, syscall.MNT_DETACH)
		}
	}
	if ms := clusterMounts(c); len(ms) > 0 {
		return fmt.Errorf("could not unmount %s", strings.Join(ms, " "))
	}
	return nil
}

// removeLogLinks removes kubelet's links in /var/log/containers to the cluster's pod logs.
func removeLogLinks(c *Cluster) {
	entries, _ := os.ReadDir("/var/log/containers")
	for _, e := range entries {
		p := filepath.Join("/var/log/containers", e.Name())
		if t, err := os.Readlink(p); err == nil && strings.HasPrefix(t, c.BaseDir+"/") {
			_ = os.Remove(p)
		}
	}
}

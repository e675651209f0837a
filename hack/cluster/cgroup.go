package main

// Cgroups by path, in every hierarchy of the machine: cgroup v1 (one mount per controller,
// and the named systemd and unified ones of a hybrid host) or the single v2 hierarchy. The
// cluster's processes all live under /crust-<cluster>, which is how `down` finds them.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

const cgroupFS = "/sys/fs/cgroup"

// hierarchies lists the mount points of every cgroup hierarchy (each once).
func hierarchies() ([]string, error) {
	if _, err := os.Stat(filepath.Join(cgroupFS, "cgroup.controllers")); err == nil {
		return []string{cgroupFS}, nil
	}
	entries, err := os.ReadDir(cgroupFS)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var hs []string
	for _, e := range entries {
		p := filepath.Join(cgroupFS, e.Name())
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] {
			continue
		}
		if st, err := os.Stat(real); err != nil || !st.IsDir() {
			continue
		}
		if _, err := os.Stat(filepath.Join(real, "cgroup.procs")); err != nil {
			continue
		}
		seen[real] = true
		hs = append(hs, real)
	}
	if len(hs) == 0 {
		return nil, fmt.Errorf("no cgroup hierarchy under %s", cgroupFS)
	}
	return hs, nil
}

// makeCgroup creates the cgroup in every hierarchy. In a v1 cpuset hierarchy a new cgroup has
// no CPUs or memory nodes until given its parent's, and takes no process before.
func makeCgroup(path string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		dir := h
		for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
			parent := dir
			dir = filepath.Join(dir, part)
			if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				cur, err := os.ReadFile(filepath.Join(dir, f))
				if err != nil || strings.TrimSpace(string(cur)) != "" {
					continue
				}
				v, err := os.ReadFile(filepath.Join(parent, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// joinCgroup moves a process into the cgroup in every hierarchy.
func joinCgroup(path string, pid int) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	for _, h := range hs {
		f := filepath.Join(h, path, "cgroup.procs")
		if err := os.WriteFile(f, []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
	}
	return nil
}

// cgroupPids lists every process in the cgroup or below it, in any hierarchy.
func cgroupPids(path string) ([]int, error) {
	hs, err := hierarchies()
	if err != nil {
		return nil, err
	}
	set := map[int]bool{}
	for _, h := range hs {
		root := filepath.Join(h, path)
		err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil
				}
				return err
			}
			if d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil // removed meanwhile
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					set[pid] = true
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	pids := make([]int, 0, len(set))
	for p := range set {
		pids = append(pids, p)
	}
	sort.Ints(pids)
	return pids, nil
}

// removeCgroup removes the cgroup and every cgroup below it, deepest first, in every hierarchy.
func removeCgroup(path string) error {
	hs, err := hierarchies()
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hs {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, path), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// cgroupExists tells whether the cgroup exists in any hierarchy.
func cgroupExists(path string) bool {
	hs, _ := hierarchies()
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h, path)); err == nil {
			return true
		}
	}
	return false
}

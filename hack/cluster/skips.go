package main

// The skip list of the cluster suite (e2e-cluster-config/skips.txt), in the node suite's format:
// `<regex> | <reason>` per line, comments (#) and blank lines ignored. A reason is
// "host: <a fact of this machine that containerd's run shares>" or "not built yet: <feature
// with an open issue>". Each regex goes to ginkgo as a --skip; an entry that matches no spec
// of the focus fails the run, so that the list never outlives what it names.

import (
	"fmt"
	"os"
	"regexp"
	"strings"
)

// Skip is one entry of the list.
type Skip struct {
	Regex  *regexp.Regexp
	Reason string
}

var skipReason = regexp.MustCompile(`^(host|not built yet): .`)

// ReadSkips parses a skip list; no path means no skips.
func ReadSkips(path string) ([]Skip, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var skips []Skip
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		re, reason, ok := strings.Cut(line, " | ")
		re, reason = strings.TrimSpace(re), strings.TrimSpace(reason)
		if !ok || re == "" || reason == "" {
			return nil, fmt.Errorf("%s:%d: not `<regex> | <reason>`: %s", path, i+1, line)
		}
		if !skipReason.MatchString(reason) {
			return nil, fmt.Errorf("%s:%d: the reason is \"host: ...\" or \"not built yet: ...\": %s", path, i+1, reason)
		}
		compiled, err := regexp.Compile(re)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		skips = append(skips, Skip{Regex: compiled, Reason: reason})
	}
	return skips, nil
}

// unmatchedSkips lists the entries that match none of the specs the focus selected and the
// skips left out.
func unmatchedSkips(skips []Skip, focus string, notRun []string) ([]string, error) {
	f, err := regexp.Compile(focus)
	if err != nil {
		return nil, fmt.Errorf("the focus %q: %w", focus, err)
	}
	var unmatched []string
	for _, s := range skips {
		found := false
		for _, name := range notRun {
			if f.MatchString(name) && s.Regex.MatchString(name) {
				found = true
				break
			}
		}
		if !found {
			unmatched = append(unmatched, s.Regex.String())
		}
	}
	return unmatched, nil
}

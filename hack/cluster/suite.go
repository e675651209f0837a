package main

// `e2e`: Kubernetes' conformance suite (e2e.test) against a cluster that is up, as the kind
// and kubetest2 runners run it: ginkgo processes over the compiled suite, the skeleton provider,
// the cluster reached through its kubeconfig only. It knows nothing of how the cluster was
// made. The verdict comes from ginkgo's JSON report: each selected spec passed, failed (or
// panicked, timed out, was interrupted) or was skipped by the suite itself; specs outside the
// focus are counted apart.

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// SuiteRun is one run of the suite.
type SuiteRun struct {
	Tools      string // e2e.test, ginkgo, kubectl
	Kubeconfig string
	Workers    int // schedulable nodes (--num-nodes)
	DNSDomain  string
	Focus      string
	Skip       string
	Skips      []Skip // the skip list's entries, each a --skip of its own
	Procs      int    // ginkgo processes
	Timeout    time.Duration
	ReportDir  string
}

type specReport struct {
	ContainerHierarchyTexts []string
	LeafNodeText            string
	LeafNodeType            string
	State                   string
	Failure                 *struct {
		Message  string
		Location struct {
			FileName   string
			LineNumber int
		}
	}
}

func (s specReport) name() string {
	return strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
}

// Verdict counts a report's specs.
type Verdict struct {
	Passed, Failed, Skipped, NotSelected []string
	Failures                             map[string]string
}

func ReadVerdict(path string) (*Verdict, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var reports []struct{ SpecReports []specReport }
	if err := json.Unmarshal(b, &reports); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(reports) == 0 {
		return nil, fmt.Errorf("%s: no suite report", path)
	}
	v := &Verdict{Failures: map[string]string{}}
	for _, s := range reports[0].SpecReports {
		if s.LeafNodeType != "It" {
			continue
		}
		n := s.name()
		msg := ""
		if s.Failure != nil {
			msg = s.Failure.Message
		}
		switch {
		case s.State == "passed":
			v.Passed = append(v.Passed, n)
		case s.State == "skipped" && msg == "":
			v.NotSelected = append(v.NotSelected, n)
		case s.State == "skipped":
			v.Skipped = append(v.Skipped, n)
			v.Failures[n] = msg
		default:
			v.Failed = append(v.Failed, n)
			loc := ""
			if s.Failure != nil {
				loc = fmt.Sprintf("%s:%d: ", filepath.Base(s.Failure.Location.FileName), s.Failure.Location.LineNumber)
			}
			v.Failures[n] = s.State + " at " + loc + msg
		}
	}
	for _, l := range [][]string{v.Passed, v.Failed, v.Skipped} {
		sort.Strings(l)
	}
	return v, nil
}

// Print writes the failed and skipped specs, then the counts as the last line.
func (v *Verdict) Print(out io.Writer) {
	for _, n := range v.Skipped {
		fmt.Fprintf(out, "e2e-cluster: skipped by the suite: %s\n      %s\n", n, firstLines(v.Failures[n], 3))
	}
	for _, n := range v.Failed {
		fmt.Fprintf(out, "e2e-cluster: FAILED: %s\n      %s\n", n, firstLines(v.Failures[n], 6))
	}
	fmt.Fprintf(out, "e2e-cluster: %d specs outside the focus\n", len(v.NotSelected))
	fmt.Fprintf(out, "e2e-cluster: %d passed, %d failed, %d skipped\n", len(v.Passed), len(v.Failed), len(v.Skipped))
}

func firstLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = append(ls[:n], "...")
	}
	return strings.Join(ls, "\n      ")
}

// Run runs the suite; it fails unless a report was written and every selected spec passed.
func (r SuiteRun) Run(out io.Writer) error {
	for _, b := range []string{"e2e.test", "ginkgo", "kubectl"} {
		if err := executable(filepath.Join(r.Tools, b)); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(r.ReportDir); err != nil {
		return err
	}
	if err := os.MkdirAll(r.ReportDir, 0o755); err != nil {
		return err
	}
	args := []string{"--nodes=" + fmt.Sprint(r.Procs), "--no-color", "--timeout=" + r.Timeout.String(),
		"--focus=" + r.Focus, "--json-report=report.json", "--output-dir=" + r.ReportDir}
	if r.Skip != "" {
		args = append(args, "--skip="+r.Skip)
	}
	for _, s := range r.Skips {
		args = append(args, "--skip="+s.Regex.String())
	}
	args = append(args, filepath.Join(r.Tools, "e2e.test"), "--",
		"--kubeconfig="+r.Kubeconfig,
		"--provider=skeleton",
		fmt.Sprintf("--num-nodes=%d", r.Workers),
		"--kubectl-path="+filepath.Join(r.Tools, "kubectl"),
		"--dns-domain="+r.DNSDomain,
		"--report-dir="+r.ReportDir)
	logPath := filepath.Join(r.ReportDir, "suite.log")
	log, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(filepath.Join(r.Tools, "ginkgo"), args...)
	cmd.Dir = r.ReportDir
	cmd.Stdout, cmd.Stderr = log, log
	// As the conformance jobs set it (RuntimeClass specs read it).
	cmd.Env = append(os.Environ(), "KUBERNETES_CONFORMANCE_TEST=y", "KUBECONFIG="+r.Kubeconfig)
	fmt.Fprintf(out, "e2e-cluster: ginkgo %s (output in %s)\n", strings.Join(args, " "), logPath)
	start := time.Now()
	runErr := cmd.Run()
	elapsed := time.Since(start).Round(time.Second)
	v, err := ReadVerdict(filepath.Join(r.ReportDir, "report.json"))
	if err != nil {
		return fmt.Errorf("the suite wrote no report (%v; ginkgo: %v); the end of %s:\n%s", err, runErr, logPath, tail(logPath, 40))
	}
	fmt.Fprintf(out, "e2e-cluster: ran in %s\n", elapsed)
	v.Print(out)
	unmatched, err := unmatchedSkips(r.Skips, r.Focus, v.NotSelected)
	if err != nil {
		return err
	}
	for _, re := range unmatched {
		fmt.Fprintf(out, "e2e-cluster: FAILED: the skip list's entry %q matches no spec of the focus\n", re)
	}
	switch {
	case len(unmatched) > 0:
		return fmt.Errorf("%d skip list entries match no spec of the focus", len(unmatched))
	case len(v.Failed) > 0 || len(v.Skipped) > 0:
		return fmt.Errorf("%d failed, %d skipped", len(v.Failed), len(v.Skipped))
	case len(v.Passed) == 0:
		return fmt.Errorf("no spec ran (focus %q)", r.Focus)
	case runErr != nil:
		return fmt.Errorf("every spec passed, but ginkgo: %v; the end of %s:\n%s", runErr, logPath, tail(logPath, 20))
	}
	return nil
}

package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestReadVerdict(t *testing.T) {
	report := `[{"SpecReports": [
	 {"LeafNodeType": "BeforeSuite", "State": "passed"},
	 {"ContainerHierarchyTexts": ["[sig-network] DNS"], "LeafNodeText": "should work [Conformance]", "LeafNodeType": "It", "State": "passed"},
	 {"ContainerHierarchyTexts": ["[sig-apps] X"], "LeafNodeText": "fails [Conformance]", "LeafNodeType": "It", "State": "failed",
	  "Failure": {"Message": "boom", "Location": {"FileName": "/x/k8s.io/kubernetes@v1.37.2/test/e2e/apps/x.go", "LineNumber": 7}}},
	 {"ContainerHierarchyTexts": ["[sig-node] Y"], "LeafNodeText": "needs a thing", "LeafNodeType": "It", "State": "skipped",
	  "Failure": {"Message": "Only supported for providers [gce]"}},
	 {"ContainerHierarchyTexts": ["[sig-storage] Z"], "LeafNodeText": "not focused", "LeafNodeType": "It", "State": "skipped"}
	]}]`
	p := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(p, []byte(report), 0o644); err != nil {
		t.Fatal(err)
	}
	v, err := ReadVerdict(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Passed) != 1 || len(v.Failed) != 1 || len(v.Skipped) != 1 || len(v.NotSelected) != 1 {
		t.Fatalf("got %+v", v)
	}
	if got := v.Failures["[sig-apps] X fails [Conformance]"]; got != "failed at x.go:7: boom" {
		t.Errorf("failure: %q", got)
	}
}

func TestSkips(t *testing.T) {
	p := filepath.Join(t.TempDir(), "skips.txt")
	list := "# a comment\n\n\\[sig-x\\] A spec | host: a fact\n\\[sig-y\\] gone | not built yet: a thing\n"
	if err := os.WriteFile(p, []byte(list), 0o644); err != nil {
		t.Fatal(err)
	}
	skips, err := ReadSkips(p)
	if err != nil || len(skips) != 2 {
		t.Fatalf("ReadSkips: %v %v", skips, err)
	}
	notRun := []string{"[sig-x] A spec [Conformance]", "[sig-y] gone, but not conformance"}
	unmatched, err := unmatchedSkips(skips, `\[Conformance\]`, notRun)
	if err != nil || len(unmatched) != 1 || unmatched[0] != `\[sig-y\] gone` {
		t.Errorf("unmatched: %v %v", unmatched, err)
	}
	for _, bad := range []string{"no separator\n", "x | why: not a kind of reason\n", "( | host: bad regex\n"} {
		if err := os.WriteFile(p, []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadSkips(p); err == nil {
			t.Errorf("ReadSkips accepted %q", bad)
		}
	}
}

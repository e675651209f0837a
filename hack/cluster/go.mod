// The test cluster's harness (hack/cluster.sh up|down|status): standard library only, so it
// builds in seconds with nothing to download.
module crust/hack/cluster

go 1.26.0

// Pins checkpointctl (hack/build-tools.sh checkpointctl), which shows and inspects the
// checkpoint archives crust writes (tests/checkpoint.rs).
module crust/hack/tools/checkpointctl

go 1.26.0

require github.com/checkpoint-restore/checkpointctl v1.6.0

require (
	cyphar.com/go-pathrs v0.2.5 // indirect
	github.com/checkpoint-restore/go-criu/v8 v8.4.0 // indirect
	github.com/containers/storage v1.59.1 // indirect
	github.com/cyphar/filepath-securejoin v0.7.0 // indirect
	github.com/docker/go-units v0.5.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/klauspost/compress v1.18.2 // indirect
	github.com/klauspost/pgzip v1.2.6 // indirect
	github.com/moby/sys/capability v0.4.0 // indirect
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	github.com/moby/sys/user v0.4.0 // indirect
	github.com/opencontainers/runtime-spec v1.3.0 // indirect
	github.com/sirupsen/logrus v1.9.4 // indirect
	github.com/spf13/cobra v1.10.2 // indirect
	github.com/spf13/pflag v1.0.10 // indirect
	github.com/ulikunitz/xz v0.5.15 // indirect
	github.com/xlab/treeprint v1.2.0 // indirect
	golang.org/x/sys v0.46.0 // indirect
	google.golang.org/protobuf v1.36.11 // indirect
)

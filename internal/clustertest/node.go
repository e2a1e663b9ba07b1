package clustertest

import (
	"testing"

	"github.com/switchyard-dev/switchyard/internal/sdktest"
	"github.com/switchyard-dev/switchyard/sdk"
)

// Node is an SDK node agent running in the test process.
type Node = sdktest.Node

// RunNode starts an SDK node, stopped when the test ends (see sdktest.Run).
func RunNode(t testing.TB, cfg sdk.NodeConfig) *Node { return sdktest.Run(t, cfg) }

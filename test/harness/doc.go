// Package harness starts the real Kubernetes components featureplug runs next
// to — etcd and kube-apiserver with the NFD CRDs, nfd-master, and the kubelet's
// device manager — on loopback, for end-to-end tests.
//
// Every helper takes a testing.TB, registers its own t.Cleanup to stop what it
// started (also when the test fails), and keeps each process's log in a file;
// when the test fails, the tail of every log is printed with t.Log.
//
// The component binaries are built once by test/components/build.sh into a
// cache directory outside the clone (see Binaries). A helper that finds a
// binary missing runs that script, or fails with the command to run when the
// test deadline leaves no time for a cold build.
//
// Typical use:
//
//	api := harness.StartAPIServer(t)
//	harness.StartNFDMaster(t, api, "node-a")
//	peer := harness.StartKubeletPeer(t, t.TempDir())
//	// start device plugins that register at peer.SocketPath ...
//	peer.WaitRegistered(ctx, "example.com/gpu", 2)
package harness

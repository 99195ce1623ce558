package discovery_test

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/featureplug/featureplug/discovery"
)

const (
	reliability       = "../docs/reliability.md"
	healthTablesBegin = "<!-- health-tables:begin (generated from discovery/xidcatalog.go and discovery/healthpolicy.go: go test ./discovery -run TestReliabilityHealthTables -update) -->\n"
	healthTablesEnd   = "<!-- health-tables:end -->\n"
)

// eventEvidence says where each kind of health event comes from in NVML,
// for the document.
var eventEvidence = map[discovery.HealthEventKind]string{
	discovery.EventXID:                   "`EventTypeXidCriticalError`",
	discovery.EventECCDoubleBit:          "`EventTypeDoubleBitEccError`",
	discovery.EventGPULost:               "`ERROR_GPU_IS_LOST` from any query; `EventTypeGpuUnavailableError`",
	discovery.EventRetiredPagesPending:   "`nvmlDeviceGetRetiredPagesPendingStatus` (GPUs that retire pages)",
	discovery.EventRowRemapPending:       "`nvmlDeviceGetRemappedRows` isPending (GPUs that remap rows)",
	discovery.EventRowRemapFailure:       "`nvmlDeviceGetRemappedRows` failureOccurred",
	discovery.EventECCVolatileDoubleBit:  "`nvmlDeviceGetTotalEccErrors` (uncorrected, volatile) above 0",
	discovery.EventRecoveryAction:        "`FI_DEV_GET_GPU_RECOVERY_ACTION` not none; `EventTypeGpuRecoveryAction` (the driver logs XID 154)",
	discovery.EventNVLinkDown:            "`FI_DEV_NVLINK_GET_STATE`: a link seen active reads inactive",
	discovery.EventNVLinkErrors:          "`FI_DEV_NVLINK_COUNT_LINK_RECOVERY_FAILED_EVENTS` grew",
	discovery.EventPageRetirementFailure: "`EventTypeDramRetirementFailure`",
	discovery.EventResetCleared:          "no recovery action, retired page or row remapping pending any more",
}

// healthTables writes the default health policy as reliability.md's tables:
// effects by resolution, the other kinds of event, and every XID.
func healthTables() []byte {
	var b bytes.Buffer
	b.WriteString("Default effect of each resolution of NVIDIA's XID catalog:\n\n| resolution | effect | why |\n| --- | --- | --- |\n")
	for _, r := range discovery.XIDResolutions() {
		effect, why := discovery.ResolutionDefault(r)
		name := "`" + string(r) + "`"
		if r == discovery.ResolutionNone {
			name, effect = "(none given)", discovery.DefaultUnknownXIDEffect
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s |\n", name, effect, why)
	}
	fmt.Fprintf(&b, "| (not in the catalog) | `%s` | an XID newer than the catalog: held for the quiet period |\n", discovery.DefaultUnknownXIDEffect)

	b.WriteString("\nThe other health events:\n\n| kind | from NVML | effect | why |\n| --- | --- | --- | --- |\n")
	for _, k := range discovery.HealthEventKinds() {
		effect, why := discovery.EventDefault(k)
		e := "`" + string(effect) + "`"
		if effect == "" {
			e = "by the event"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k, eventEvidence[k], e, why)
	}

	b.WriteString("\nEvery XID of the catalog (" + discovery.XIDCatalogSource + "), its default effect, and what NVIDIA's device plugin does with it:\n\n")
	b.WriteString("| XID | mnemonic | description | resolution | featureplug | NVIDIA's device plugin |\n| --- | --- | --- | --- | --- | --- |\n")
	var unused []uint64
	for _, e := range discovery.XIDCatalog() {
		if e.Description == "Unused" && e.Resolution == discovery.ResolutionContactSupport {
			unused = append(unused, e.XID)
			continue
		}
		effect, _ := discovery.HealthPolicy{}.XIDEffect(e.XID)
		resolution := "`" + string(e.Resolution) + "`"
		if e.Resolution == discovery.ResolutionNone {
			resolution = "(none given)"
		}
		fmt.Fprintf(&b, "| %d | `%s` | %s | %s | `%s` | %s |\n", e.XID, strings.ReplaceAll(e.Mnemonic, " / ", "` / `"), e.Description, resolution, effect, nvidiaPlugin(e.XID))
	}
	effect, _ := discovery.HealthPolicy{}.XIDEffect(unused[0])
	fmt.Fprintf(&b, "| %s | | unused: no supported GPU reports them | `CONTACT_SUPPORT` | `%s` | unhealthy until it restarts |\n", discovery.FormatXIDs(unused), effect)
	return b.Bytes()
}

// nvidiaPlugin says what NVIDIA's device plugin does with an XID by default.
func nvidiaPlugin(xid uint64) string {
	switch xid {
	case 13, 31, 43, 45, 68, 109:
		return "ignored"
	}
	return "unhealthy until it restarts"
}

// TestReliabilityHealthTables fails when docs/reliability.md's health
// tables are not the catalog's and the default policy's; -update rewrites
// them.
func TestReliabilityHealthTables(t *testing.T) {
	for _, k := range discovery.HealthEventKinds() {
		if eventEvidence[k] == "" {
			t.Errorf("eventEvidence says nothing of %s", k)
		}
	}
	data, err := os.ReadFile(reliability)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok := bytes.Cut(data, []byte(healthTablesBegin))
	current, after, ok2 := bytes.Cut(rest, []byte(healthTablesEnd))
	if !ok || !ok2 {
		t.Fatalf("%s: no %q ... %q section", reliability, healthTablesBegin, healthTablesEnd)
	}
	want := healthTables()
	if bytes.Equal(current, want) {
		return
	}
	if *update {
		out := bytes.Join([][]byte{before, []byte(healthTablesBegin), want, []byte(healthTablesEnd), after}, nil)
		if err := os.WriteFile(reliability, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s: the health tables are not the catalog's (run go test ./discovery -run %s -update)\n--- want\n%s", reliability, t.Name(), want)
}

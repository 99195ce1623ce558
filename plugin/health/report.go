package health

import (
	"encoding/json"
	"net/http"
	"time"
)

// ReportPath is where the agent serves the tracker's Report.
const ReportPath = "/debug/health"

// Report is the node's device health as `featureplug health` prints it:
// NVML's state and every served device's.
type Report struct {
	// NVML says whether NVML answers.
	NVML NVMLState `json:"nvml"`
	// Devices are the plan's devices, sorted by resource and device.
	Devices []DeviceState `json:"devices"`
}

// NVMLState is whether NVML answers, and since when and why not.
type NVMLState struct {
	Available bool      `json:"available"`
	Since     time.Time `json:"since,omitzero"`
	Error     string    `json:"error,omitempty"`
}

// Report returns the node's device health now.
func (t *Tracker) Report() Report {
	r := Report{NVML: NVMLState{Available: true}, Devices: t.DeviceHealth()}
	if since, err := t.NVMLFailure(); err != nil {
		r.NVML = NVMLState{Since: since, Error: err.Error()}
	}
	return r
}

// Endpoints serves GET ReportPath: the Report as JSON.
func (t *Tracker) Endpoints(mux *http.ServeMux) {
	mux.HandleFunc("GET "+ReportPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(t.Report())
	})
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/featureplug/featureplug/plugin/health"
)

// healthTimeout bounds the request to the agent.
const healthTimeout = 10 * time.Second

// maxHealthReport bounds the agent's answer read.
const maxHealthReport = 16 << 20

func newHealthCommand() *cobra.Command {
	var agent, output string
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Print each served device's health from a running agent: state, reason, since and until",
		Long: `Reads a running agent's device health (GET ` + health.ReportPath + ` on its --metrics-addr) and
prints, for every whole GPU and MIG device of its plan, whether it is Healthy and,
when it is not, why (the bounded reason of featureplug_device_health), since when,
and what ends it: a time for a quiet period, or a GPU reset, a reboot, NVML
answering again. A line above the table says when NVML fails.`,
		Example: `  featureplug health                                  # the agent on this node (:8080)
  featureplug health --agent http://10.0.0.7:8080 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output, "table", "json"); err != nil {
				return err
			}
			r, err := fetchHealth(cmd.Context(), agent)
			if err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return printHealth(cmd.OutOrStdout(), r, time.Now())
		},
	}
	cmd.Flags().StringVar(&agent, "agent", "http://127.0.0.1:8080", "the agent's --metrics-addr, as a URL")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// fetchHealth reads the agent's health report.
func fetchHealth(ctx context.Context, agent string) (*health.Report, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	url := strings.TrimSuffix(agent, "/") + health.ReportPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--agent %s: %w", agent, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reading the agent's device health at %s (is featureplug run serving --metrics-addr there?): %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxHealthReport))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s answered %s: %s (an agent older than the health command?)", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var r health.Report
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("%s: not a device health report: %w", url, err)
	}
	return &r, nil
}

// printHealth prints r as a table, with times relative to now.
func printHealth(w io.Writer, r *health.Report, now time.Time) error {
	if !r.NVML.Available {
		if _, err := fmt.Fprintf(w, "NVML fails since %s (%s ago): %s\n\n", r.NVML.Since.UTC().Format(time.RFC3339),
			now.Sub(r.NVML.Since).Round(time.Second), r.NVML.Error); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tDEVICE\tSTATE\tREASON\tSINCE\tUNTIL")
	for _, s := range r.Devices {
		d := s.Device
		state, reason, since, until := "Healthy", "", "", ""
		if d.Reason != health.ReasonHealthy {
			state, reason = "Unhealthy", d.Reason
			if !d.Since.IsZero() {
				since = d.Since.UTC().Format(time.RFC3339)
			}
			until = d.WaitsFor
			if !d.Until.IsZero() {
				until = d.Until.UTC().Format(time.RFC3339) + " (in " + d.Until.Sub(now).Round(time.Second).String() + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Resource, d.Key, state, reason, since, until)
	}
	return tw.Flush()
}

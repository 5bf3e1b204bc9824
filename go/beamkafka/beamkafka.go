// Package beamkafka runs Beam Go pipelines on beam-kafka, a Beam runner on
// Apache Kafka. Import it for its side effects and pick its runner:
//
//	import _ "beamkafka.dev/go/beamkafka"
//
//	go run ./mypipeline --runner=beamkafka --endpoint=localhost:8099 \
//	    --bootstrap_servers=localhost:9092 --application_id=orders
//
// It registers the runner "beamkafka" (Beam's portable runner, submitting to
// a beam-kafka job server, localhost:8099 unless --endpoint says otherwise)
// and defines the runner's options as flags, so a program that defines
// none of them still accepts them (Go refuses flags a program does not
// define). Every option is optional: without --application_id the job
// server names the application after the job, and without
// --bootstrap_servers the job uses the job server's own Kafka.
package beamkafka

import (
	"context"
	"flag"
	"strings"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/options/jobopts"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/universal"
)

// RunnerName is the name --runner takes.
const RunnerName = "beamkafka"

// DefaultEndpoint is the job server Execute submits to when --endpoint is unset.
const DefaultEndpoint = "localhost:8099"

func init() {
	defineFlags(flag.CommandLine)
	beam.RegisterRunner(RunnerName, Execute)
}

// defineFlags defines each runner option not defined yet (a program, or a
// package it imports, may define one itself: its own then stays).
func defineFlags(fs *flag.FlagSet) {
	for _, o := range Options {
		if fs.Lookup(o.Name) != nil {
			continue
		}
		switch o.Kind {
		case Boolean:
			fs.Bool(o.Name, false, o.Usage)
		case Integer:
			fs.Int64(o.Name, 0, o.Usage)
		case List:
			fs.Var(&listFlag{}, o.Name, o.Usage+" (repeatable)")
		default:
			fs.String(o.Name, "", o.Usage)
		}
	}
}

// Execute submits the pipeline to the beam-kafka job server at --endpoint
// and, unless --async, waits for it to end.
func Execute(ctx context.Context, p *beam.Pipeline) (beam.PipelineResult, error) {
	if *jobopts.Endpoint == "" {
		*jobopts.Endpoint = DefaultEndpoint
	}
	return universal.Execute(ctx, p)
}

// listFlag gathers a repeated flag. Go sends every option as text, so the
// values go as a JSON list of strings, which the job server reads as the
// list (one value goes as itself).
type listFlag struct{ values []string }

func (l *listFlag) String() string {
	if l == nil || len(l.values) == 0 {
		return ""
	}
	if len(l.values) == 1 {
		return l.values[0]
	}
	quoted := make([]string, len(l.values))
	for i, v := range l.values {
		quoted[i] = quote(v)
	}
	return "[" + strings.Join(quoted, ",") + "]"
}

func (l *listFlag) Set(v string) error {
	l.values = append(l.values, v)
	return nil
}

// quote writes v as a JSON string.
func quote(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range v {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte("0123456789abcdef"[r>>4])
			b.WriteByte("0123456789abcdef"[r&0xf])
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

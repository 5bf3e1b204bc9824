"""Writes seed inputs for the fuzz targets: real pipelines and expansion
payloads as the pinned Python SDK builds them (generated, never committed).

Usage: python seeds.py <corpus root>
"""
import os
import sys

import apache_beam as beam
from apache_beam.io.kafka import ReadFromKafka
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.transforms import window
from apache_beam.transforms.userstate import BagStateSpec, TimerSpec, on_timer
from apache_beam.transforms.timeutil import TimeDomain


class Stateful(beam.DoFn):
    BAG = BagStateSpec("bag", beam.coders.VarIntCoder())
    TIMER = TimerSpec("t", TimeDomain.WATERMARK)

    def process(self, kv, bag=beam.DoFn.StateParam(BAG), t=beam.DoFn.TimerParam(TIMER)):
        bag.add(kv[1])
        t.set(10)

    @on_timer(TIMER)
    def fire(self, bag=beam.DoFn.StateParam(BAG)):
        yield sum(bag.read())


def pipelines():
    def new():
        return beam.Pipeline(options=PipelineOptions(["--streaming"]))

    p = new()
    words = p | beam.Create(["a b", "c a"]) | beam.FlatMap(str.split)
    counts = words | beam.Map(lambda w: (w, 1)) | beam.CombinePerKey(sum)
    counts | beam.Map(print)
    yield "wordcount", p

    p = new()
    main = p | "main" >> beam.Create([1, 2, 3])
    side = p | "side" >> beam.Create([10])
    main | beam.Map(lambda x, s: x + s, s=beam.pvalue.AsSingleton(side)) | beam.GroupBy(lambda x: x % 2)
    yield "side_input", p

    p = new()
    (p | beam.Create([("k", 1)]) | "sessions" >> beam.WindowInto(window.Sessions(10)) | beam.GroupByKey()
     | "sliding" >> beam.WindowInto(window.SlidingWindows(10, 5)) | beam.Map(lambda kv: (kv[0], 1))
     | beam.ParDo(Stateful()))
    yield "windows_state", p

    p = new()
    p | beam.io.ReadFromText("/nonexistent/*.txt", validate=False)
    yield "splittable", p


def main(root):
    os.makedirs(os.path.join(root, "pipeline"), exist_ok=True)
    for name, p in pipelines():
        with open(os.path.join(root, "pipeline", name), "wb") as f:
            f.write(p.to_runner_api().SerializeToString())
        from apache_beam.portability.api import beam_runner_api_pb2
        only_coders = beam_runner_api_pb2.Components()
        for cid, c in p.to_runner_api().components.coders.items():
            only_coders.coders[cid].CopyFrom(c)
        blob = only_coders.SerializeToString()[:0xFFFF]
        os.makedirs(os.path.join(root, "coder"), exist_ok=True)
        with open(os.path.join(root, "coder", name), "wb") as f:
            f.write(b"\xff" + len(blob).to_bytes(2, "big") + blob + b"\x00\x00\x00\x01\x01")
    read = ReadFromKafka(consumer_config={"bootstrap.servers": "localhost:9092"}, topics=["t"],
                         expansion_service="localhost:1")
    payload = read._payload
    os.makedirs(os.path.join(root, "row"), exist_ok=True)
    with open(os.path.join(root, "row", "read_from_kafka"), "wb") as f:
        f.write(b"\x01" + payload)
    from apache_beam.portability.api import beam_expansion_api_pb2, beam_runner_api_pb2
    request = beam_expansion_api_pb2.ExpansionRequest(
        transform=beam_runner_api_pb2.PTransform(
            unique_name="read", spec=beam_runner_api_pb2.FunctionSpec(urn=read._urn, payload=payload)),
        namespace="fuzz")
    with open(os.path.join(root, "row", "expansion_request"), "wb") as f:
        f.write(b"\x00" + request.SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1])

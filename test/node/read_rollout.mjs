// Reads a rollout bag the way Foxglove does: @mcap/core's indexed reader (summary, chunk indexes, seek by time)
// with @mcap/support's decompressors, and @foxglove/rosmsg2-serialization for the CDR of each ROS 2 message.
// Usage: node read_rollout.mjs FILE.mcap START_NS END_NS  ->  one JSON object on stdout.
import { open } from "node:fs/promises";
import { McapIndexedReader } from "@mcap/core";
import { FileHandleReadable } from "@mcap/nodejs";
import { loadDecompressHandlers } from "@mcap/support";
import { parse } from "@foxglove/rosmsg";
import { MessageReader } from "@foxglove/rosmsg2-serialization";

const [file, startNs, endNs] = process.argv.slice(2);
const handle = await open(file, "r");
try {
  const reader = await McapIndexedReader.Initialize({
    readable: new FileHandleReadable(handle),
    decompressHandlers: await loadDecompressHandlers(),
  });
  const counts = {};
  for (const [channelId, n] of reader.statistics?.channelMessageCounts ?? []) {
    counts[reader.channelsById.get(channelId).topic] = Number(n);
  }
  const decoders = new Map();
  const decode = (channelId, data) => {
    if (!decoders.has(channelId)) {
      const schema = reader.schemasById.get(reader.channelsById.get(channelId).schemaId);
      decoders.set(channelId, new MessageReader(parse(new TextDecoder().decode(schema.data), { ros2: true })));
    }
    return decoders.get(channelId).readMessage(data);
  };
  const read = {};
  let decoded = 0;
  for await (const message of reader.readMessages()) {
    const topic = reader.channelsById.get(message.channelId).topic;
    const msg = decode(message.channelId, message.data);
    decoded += 1;
    if (!(topic in read)) {
      read[topic] = {
        format: msg.format ?? null,
        encoding: msg.encoding ?? null,
        width: msg.width ?? null,
        bytes: msg.data?.length ?? null,
        text: typeof msg.data === "string" ? msg.data : null,
        stamp_ns: msg.header ? String(BigInt(msg.header.stamp.sec) * 1000000000n + BigInt(msg.header.stamp.nanosec)) : null,
      };
    }
  }
  const window = [];
  for await (const message of reader.readMessages({ startTime: BigInt(startNs), endTime: BigInt(endNs) })) {
    window.push(String(message.logTime));
  }
  console.log(JSON.stringify({
    library: reader.header.library,
    message_count: Number(reader.statistics.messageCount),
    chunk_count: reader.chunkIndexes.length,
    counts, read, decoded, window,
  }));
} finally {
  await handle.close();
}

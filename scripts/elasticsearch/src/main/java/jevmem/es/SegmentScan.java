package jevmem.es;

import org.apache.lucene.document.Document;
import org.apache.lucene.index.DirectoryReader;
import org.apache.lucene.index.IndexableField;
import org.apache.lucene.index.LeafReaderContext;
import org.apache.lucene.index.StoredFields;
import org.apache.lucene.store.FSDirectory;
import org.apache.lucene.util.BytesRef;
import org.elasticsearch.common.logging.LogConfigurator;
import org.elasticsearch.common.settings.Settings;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.stream.Stream;

/**
 * Reads Elasticsearch's Lucene indices the way Lucene stores them: every document of every
 * segment of the latest commit, deleted (soft or hard) or live, and counts the documents whose
 * stored fields (the _source, the recovery source, the id) hold each needle.
 *
 * Usage: java -cp ... jevmem.es.SegmentScan DIR NEEDLE...
 * DIR: a node's index folder (indices/UUID) or anything above it; every shard's "index" folder
 * under it is read. Prints one JSON object: {"shards": n, "documents": n, "hits": {needle: n}}.
 */
public final class SegmentScan {
    public static void main(String[] args) throws IOException {
        if (args.length < 2) {
            System.err.println("usage: SegmentScan DIR NEEDLE...");
            System.exit(2);
        }
        // Elasticsearch's codecs decompress stored fields with zstd through its native access,
        // which logs through Elasticsearch's logging: configure it (errors only) first
        LogConfigurator.configureESLogging();
        LogConfigurator.configureWithoutConfig(Settings.builder().put("logger.level", "ERROR").build());
        List<byte[]> needles = new ArrayList<>();
        Map<String, Integer> hits = new LinkedHashMap<>();
        for (int i = 1; i < args.length; i++) {
            needles.add(args[i].getBytes(StandardCharsets.UTF_8));
            hits.put(args[i], 0);
        }
        List<Path> shards;
        try (Stream<Path> walk = Files.walk(Path.of(args[0]))) {
            shards = walk.filter(p -> Files.isDirectory(p) && p.getFileName().toString().equals("index")
                && Files.exists(p.getParent().resolve("_state"))).toList();
        }
        long documents = 0;
        for (Path shard : shards) {
            try (FSDirectory dir = FSDirectory.open(shard); DirectoryReader reader = DirectoryReader.open(dir)) {
                for (LeafReaderContext leaf : reader.leaves()) {
                    StoredFields stored = leaf.reader().storedFields();
                    for (int doc = 0; doc < leaf.reader().maxDoc(); doc++) {  // live docs ignored: deleted ones too
                        documents++;
                        Document d = stored.document(doc);
                        for (int n = 0; n < needles.size(); n++) {
                            if (holds(d, needles.get(n))) {
                                hits.merge(args[n + 1], 1, Integer::sum);
                            }
                        }
                    }
                }
            }
        }
        StringBuilder out = new StringBuilder("{\"shards\": " + shards.size() + ", \"documents\": " + documents + ", \"hits\": {");
        int i = 0;
        for (Map.Entry<String, Integer> e : hits.entrySet()) {
            out.append(i++ == 0 ? "" : ", ").append('"').append(e.getKey().replace("\"", "\\\"")).append("\": ").append(e.getValue());
        }
        System.out.println(out.append("}}"));
    }

    private static boolean holds(Document d, byte[] needle) {
        for (IndexableField f : d.getFields()) {
            BytesRef b = f.binaryValue();
            byte[] bytes;
            int off;
            int len;
            if (b != null) {
                bytes = b.bytes;
                off = b.offset;
                len = b.length;
            } else if (f.stringValue() != null) {
                bytes = f.stringValue().getBytes(StandardCharsets.UTF_8);
                off = 0;
                len = bytes.length;
            } else {
                continue;
            }
            outer:
            for (int i = off; i <= off + len - needle.length; i++) {
                for (int j = 0; j < needle.length; j++) {
                    if (bytes[i + j] != needle[j]) {
                        continue outer;
                    }
                }
                return true;
            }
        }
        return false;
    }
}

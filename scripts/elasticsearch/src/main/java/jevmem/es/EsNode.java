package jevmem.es;

import org.elasticsearch.common.logging.LogConfigurator;
import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.node.ClasspathPluginsNode;
import org.elasticsearch.node.Node;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.transport.netty4.Netty4Plugin;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * Starts one real Elasticsearch node (server jar + Netty4 HTTP/transport) in this JVM
 * and keeps it running until the process is terminated (SIGTERM runs the shutdown hook).
 *
 * Usage: java -cp ... jevmem.es.EsNode HOME_DIR HTTP_PORT TRANSPORT_PORT
 *
 * ClasspathPluginsNode is a plain Node whose only difference is that plugins are loaded
 * from the classpath (no modules/ or plugins/ directory layout needed).
 */
public final class EsNode {
    public static void main(String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: EsNode HOME_DIR HTTP_PORT TRANSPORT_PORT");
            System.exit(2);
        }
        Path home = Path.of(args[0]).toAbsolutePath();
        Path data = home.resolve("data");
        Path logs = home.resolve("logs");
        Files.createDirectories(data);
        Files.createDirectories(logs);
        Files.createDirectories(home.resolve("config"));

        Settings settings = Settings.builder()
            .put("path.home", home.toString())
            .put("path.data", data.toString())
            .put("path.logs", logs.toString())
            .put("cluster.name", System.getProperty("es.cluster.name", "jevmem-test"))
            .put("node.name", "jevmem-es-0")
            .put("discovery.type", "single-node")
            .put("network.host", "127.0.0.1")
            .put("http.port", args[1])
            .put("transport.port", args[2])
            .put("http.type", Netty4Plugin.NETTY_HTTP_TRANSPORT_NAME)
            .put("transport.type", Netty4Plugin.NETTY_TRANSPORT_NAME)
            // small test disks must not block shard allocation
            .put("cluster.routing.allocation.disk.threshold_enabled", false)
            .put("action.auto_create_index", true)
            // root log level for the console (stdout, i.e. es.out): INFO by default
            .put("logger.level", System.getProperty("es.log.level", "INFO"))
            .build();

        LogConfigurator.registerErrorListener();
        LogConfigurator.setNodeName("jevmem-es-0");
        LogConfigurator.configureWithoutConfig(settings);

        // Initialise ElasticsearchException (and the exception registry it builds) on this thread (after logging
        // is set up) before any node thread can: done lazily and concurrently (e.g. an engine failure racing
        // a shutdown) the JVM class-init locks of ElasticsearchException and EngineException
        // deadlock, and the node then never stops on SIGTERM.
        Class.forName("org.elasticsearch.ElasticsearchException", true, EsNode.class.getClassLoader());

        List<Class<? extends Plugin>> plugins = List.of(Netty4Plugin.class, RootInfoPlugin.class);
        Node node = new ClasspathPluginsNode(settings, plugins);
        CountDownLatch stopped = new CountDownLatch(1);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                node.close();
                node.awaitClose(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                e.printStackTrace();
            } finally {
                stopped.countDown();
            }
        }, "es-shutdown"));
        node.start();
        System.out.println("EsNode started: http://127.0.0.1:" + args[1]);
        stopped.await();
    }
}

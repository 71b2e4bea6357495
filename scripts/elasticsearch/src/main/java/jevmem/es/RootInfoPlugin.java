package jevmem.es;

import org.elasticsearch.Build;
import org.elasticsearch.client.internal.node.NodeClient;
import org.elasticsearch.cluster.node.DiscoveryNodes;
import org.elasticsearch.cluster.service.ClusterService;
import org.elasticsearch.features.NodeFeature;
import org.elasticsearch.index.IndexVersion;
import org.elasticsearch.plugins.ActionPlugin;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.rest.BaseRestHandler;
import org.elasticsearch.rest.RestHandler;
import org.elasticsearch.rest.RestRequest;
import org.elasticsearch.rest.RestResponse;
import org.elasticsearch.rest.RestStatus;
import org.elasticsearch.xcontent.XContentBuilder;

import java.util.Collection;
import java.util.List;
import java.util.function.Predicate;
import java.util.function.Supplier;

/**
 * Serves {@code GET /} and {@code HEAD /} (cluster/version info), which the stock distribution
 * provides through its "rest-root" module. That module is not published on Maven Central, so this
 * is a small stand-in built from public server APIs. Clients (e.g. Python {@code es.info()}, readiness
 * probes) use this endpoint.
 */
public class RootInfoPlugin extends Plugin implements ActionPlugin {

    private volatile ClusterService clusterService;

    @Override
    public Collection<?> createComponents(PluginServices services) {
        this.clusterService = services.clusterService();
        return List.of();
    }

    @Override
    public Collection<RestHandler> getRestHandlers(
        RestHandlersServices restHandlersServices,
        Supplier<DiscoveryNodes> nodesInCluster,
        Predicate<NodeFeature> clusterSupportsFeature
    ) {
        return List.of(new RootHandler());
    }

    private final class RootHandler extends BaseRestHandler {
        @Override
        public String getName() {
            return "jevmem_root_info";
        }

        @Override
        public List<Route> routes() {
            return List.of(new Route(RestRequest.Method.GET, "/"), new Route(RestRequest.Method.HEAD, "/"));
        }

        @Override
        protected RestChannelConsumer prepareRequest(RestRequest request, NodeClient client) {
            return channel -> {
                if (request.method() == RestRequest.Method.HEAD) {
                    channel.sendResponse(new RestResponse(RestStatus.OK, "application/json", ""));
                    return;
                }
                ClusterService cs = clusterService;
                Build build = Build.current();
                XContentBuilder b = channel.newBuilder();
                b.startObject();
                b.field("name", cs.getNodeName());
                b.field("cluster_name", cs.getClusterName().value());
                b.field("cluster_uuid", cs.state().metadata().clusterUUID());
                b.startObject("version");
                b.field("number", build.qualifiedVersion());
                b.field("build_flavor", build.flavor());
                b.field("build_type", build.type().displayName());
                b.field("build_hash", build.hash());
                b.field("build_date", build.date());
                b.field("build_snapshot", build.isSnapshot());
                b.field("lucene_version", IndexVersion.current().luceneVersion().toString());
                b.field("minimum_wire_compatibility_version", build.minWireCompatVersion());
                b.field("minimum_index_compatibility_version", build.minIndexCompatVersion());
                b.endObject();
                b.field("tagline", "You Know, for Search");
                b.endObject();
                channel.sendResponse(new RestResponse(RestStatus.OK, b));
            };
        }
    }
}

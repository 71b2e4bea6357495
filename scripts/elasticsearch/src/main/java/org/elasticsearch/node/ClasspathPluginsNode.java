package org.elasticsearch.node;

import org.elasticsearch.common.settings.Settings;
import org.elasticsearch.env.Environment;
import org.elasticsearch.plugins.MockPluginsService;
import org.elasticsearch.plugins.Plugin;
import org.elasticsearch.plugins.PluginsLoader;
import org.elasticsearch.plugins.PluginsService;

import java.util.Collection;
import java.util.Collections;

/**
 * A real (non-mock) Elasticsearch node whose plugins are plain classes on the classpath.
 *
 * Lives in org.elasticsearch.node because NodeConstruction/NodeServiceProvider and the
 * Node(NodeConstruction) constructor are package-private; on the classpath (unnamed module)
 * a split package is allowed. Unlike the test framework's MockNode this does not touch
 * ESTestCase/LuceneTestCase, so randomizedtesting need not (and must not) be on the classpath.
 */
public class ClasspathPluginsNode extends Node {

    public ClasspathPluginsNode(Settings settings, Collection<Class<? extends Plugin>> classpathPlugins) {
        super(
            NodeConstruction.prepareConstruction(
                InternalSettingsPreparer.prepareEnvironment(settings, Collections.emptyMap(), null, () -> "jevmem-es-0"),
                null,
                new NodeServiceProvider() {
                    @Override
                    PluginsService newPluginService(Environment environment, PluginsLoader pluginsLoader) {
                        return new MockPluginsService(environment.settings(), environment, classpathPlugins);
                    }
                },
                true
            )
        );
    }
}

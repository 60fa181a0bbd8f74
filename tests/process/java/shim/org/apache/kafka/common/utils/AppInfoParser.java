// Where connect-file 4.3.1 looks for Kafka's version. Maven Central serves no connect-file
// 4.4.0 (every other Kafka artifact here is 4.4.0), and 4.4's clients moved this class to
// org.apache.kafka.common.utils.internals; the file connectors call nothing else of it.
// tests/process/test_kafka_connect.py compiles this onto the worker's class path.
package org.apache.kafka.common.utils;

public final class AppInfoParser {
    private AppInfoParser() {}

    public static String getVersion() {
        return org.apache.kafka.common.utils.internals.AppInfoParser.getVersion();
    }
}

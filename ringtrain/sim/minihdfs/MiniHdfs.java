// Written for ringtrain (ringtrain/sim/minihdfs.py runs it): a real HDFS in one JVM, Apache
// Hadoop's MiniDFSCluster, for the tests and `ringtrain sim up --hdfs`.
//
//   java -cp LIB/*:CLASSES MiniHdfs BASE_DIR HOST PORT DATANODES [serve]
//
// What clients use listens on HOST only (the web servers, NameNode's and DataNodes' internal
// ones, stay on 127.0.0.1: MiniDFSCluster sets the NameNode's). HOST may be the simulated
// cluster's bridge address, for clients in the hosts' network namespaces: the DataNodes register
// through the NameNode's service RPC address on HOST, and a DataNode's registered address is the
// one its registration came from, so clients are sent to HOST too (MiniDFSCluster points the
// client RPC address at localhost, which would register them as 127.0.0.1). Their hostname is
// HOST as well (for clients with dfs.client.use.datanode.hostname).
//
// Prints "READY hdfs://HOST:PORT" once the NameNode is out of safe mode and every DataNode has
// registered. Then reads commands, one per line, on stdin and answers "OK ..." or "ERR ...":
//   restart-namenode            stop and start the NameNode (same port, same data)
//   stop-namenode | start-namenode
//   safemode enter|leave
//   space-quota PATH BYTES      a space quota on PATH (-1: none)
//   owned PATH USER MODE        mkdir PATH owned by USER with octal MODE (permission tests)
//   stop-datanode N             (N counts the DataNodes still running)
//   restart-datanodes           the stopped ones, on their old ports, with their blocks
// End of stdin (or SIGTERM) shuts the cluster down and exits. With "serve" it reads no commands
// (stdin may be /dev/null) and runs until SIGTERM or SIGINT, then shuts down and exits.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.SafeModeAction;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.DistributedFileSystem;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.protocol.HdfsConstants;

public final class MiniHdfs {
    private static final List<MiniDFSCluster.DataNodeProperties> STOPPED = new ArrayList<>();

    private MiniHdfs() {}

    public static void main(String[] args) throws Exception {
        String base = args[0];
        String host = args[1];
        int port = Integer.parseInt(args[2]);
        int datanodes = Integer.parseInt(args[3]);
        boolean serve = args.length > 4 && "serve".equals(args[4]);
        Configuration conf = new HdfsConfiguration();
        conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, base);
        conf.set("dfs.namenode.rpc-bind-host", host);
        conf.set("dfs.namenode.servicerpc-address", host + ":0");
        conf.set("dfs.datanode.hostname", host);
        conf.set("dfs.datanode.address", host + ":0");
        conf.set("dfs.datanode.http.address", host + ":0");
        conf.set("dfs.datanode.ipc.address", host + ":0");
        conf.set("dfs.namenode.http-address", host + ":0");
        conf.setInt("dfs.replication", Math.min(datanodes, 3));
        conf.setInt("dfs.namenode.safemode.extension", 0);
        final MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf)
                .nameNodePort(port).nameNodeHttpPort(0).numDataNodes(datanodes)
                .checkDataNodeAddrConfig(true).checkDataNodeHostConfig(true)
                .format(true).build();
        cluster.waitActive();
        cluster.waitClusterUp();
        String url = "hdfs://" + host + ":" + cluster.getNameNodePort();
        if (serve) {
            serve(cluster, url);
            return;
        }
        Runtime.getRuntime().addShutdownHook(new Thread(cluster::shutdown));
        System.out.println("READY " + url);
        System.out.flush();
        final URI uri = URI.create(url);
        BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            try {
                System.out.println("OK " + run(cluster, uri, w));
            } catch (Exception e) {
                System.out.println("ERR " + w[0] + ": " + String.valueOf(e.getMessage())
                        .replace('\n', ' '));
            }
            System.out.flush();
        }
        cluster.shutdown();
        System.exit(0);
    }

    // Until SIGTERM or SIGINT, then an orderly shutdown (in a shutdown hook, a DataNode's own
    // shutdown fails with "Shutdown in progress").
    @SuppressWarnings("restriction")
    private static void serve(MiniDFSCluster cluster, String url) throws InterruptedException {
        CountDownLatch stop = new CountDownLatch(1);
        for (String name : new String[] {"TERM", "INT"}) {
            sun.misc.Signal.handle(new sun.misc.Signal(name), sig -> stop.countDown());
        }
        System.out.println("READY " + url);
        System.out.flush();
        stop.await();
        cluster.shutdown();
        System.exit(0);
    }

    // The client RPC address MiniDFSCluster configures is localhost's, which HOST may not be.
    private static DistributedFileSystem fs(MiniDFSCluster cluster, URI uri) throws Exception {
        return (DistributedFileSystem) FileSystem.get(uri, cluster.getConfiguration(0));
    }

    private static String run(MiniDFSCluster cluster, URI uri, String[] w) throws Exception {
        switch (w[0]) {
            case "restart-namenode":
                cluster.restartNameNode(true);
                cluster.waitActive();
                return w[0];
            case "stop-namenode":
                cluster.shutdownNameNode(0);
                return w[0];
            case "start-namenode":
                cluster.restartNameNode(true);
                cluster.waitActive();
                return w[0];
            case "safemode": {
                DistributedFileSystem fs = fs(cluster, uri);
                fs.setSafeMode("enter".equals(w[1]) ? SafeModeAction.ENTER
                        : SafeModeAction.LEAVE);
                return w[0] + " " + w[1];
            }
            case "space-quota": {
                DistributedFileSystem fs = fs(cluster, uri);
                Path path = new Path(w[1]);
                fs.mkdirs(path);
                fs.setQuota(path, HdfsConstants.QUOTA_DONT_SET, Long.parseLong(w[2]));
                return w[0] + " " + w[1] + " " + w[2];
            }
            case "owned": {
                FileSystem fs = fs(cluster, uri);
                Path path = new Path(w[1]);
                fs.mkdirs(path);
                fs.setOwner(path, w[2], null);
                fs.setPermission(path, new FsPermission(Short.parseShort(w[3], 8)));
                return w[0] + " " + w[1];
            }
            case "stop-datanode":
                STOPPED.add(cluster.stopDataNode(Integer.parseInt(w[1])));
                return w[0] + " " + w[1];
            case "restart-datanodes": {
                int n = STOPPED.size();
                for (MiniDFSCluster.DataNodeProperties dn : STOPPED) {
                    cluster.restartDataNode(dn, true);
                }
                STOPPED.clear();
                cluster.waitActive();
                return w[0] + " " + n;
            }
            default:
                throw new IllegalArgumentException("unknown command " + w[0]);
        }
    }
}

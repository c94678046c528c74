// Runs Apache Kafka's own PartitionChangeBuilder (kafka-metadata 4.3.1) on the cases that
// tests/controller/test_partition_change_vs_kafka.py also runs through kbroker's builder, and prints
// each resulting PartitionChangeRecord in a canonical text form. Input lines (one case each):
//   <name> <replicas> <isr> <leader> <leaderEpoch> <partitionEpoch> <lrs> <removing> <adding>
//          <acceptable> <election> <targetIsr> <targetReplicas> <targetRemoving> <targetAdding> <targetLrs>
// Lists are comma-separated ("_" = empty); a target of "-" is not set. Directories are MIGRATING for
// the partition and 00..0(100+broker) by default for new replicas. ELR is off (not finalized).
// Run in source-file mode with the Kafka jars on the class path.

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.Set;
import java.util.stream.Collectors;

import org.apache.kafka.common.DirectoryId;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.PartitionChangeRecord;
import org.apache.kafka.controller.PartitionChangeBuilder;
import org.apache.kafka.metadata.LeaderRecoveryState;
import org.apache.kafka.metadata.PartitionRegistration;
import org.apache.kafka.server.common.ApiMessageAndVersion;
import org.apache.kafka.server.common.MetadataVersion;

public class PartitionChangeDiff {
    static List<Integer> list(String s) {
        List<Integer> out = new ArrayList<>();
        if (s.equals("_")) return out;
        for (String p : s.split(",")) out.add(Integer.parseInt(p));
        return out;
    }

    static int[] array(String s) {
        return list(s).stream().mapToInt(Integer::intValue).toArray();
    }

    static String ints(List<Integer> l) {
        return l == null ? "null" : l.toString().replace(" ", "");
    }

    static String uuid(Uuid u) {
        return new java.util.UUID(u.getMostSignificantBits(), u.getLeastSignificantBits()).toString();
    }

    public static void main(String[] args) throws Exception {
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            if (line.isBlank()) continue;
            String[] f = line.trim().split("\\s+");
            int[] replicas = array(f[1]);
            Uuid[] dirs = new Uuid[replicas.length];
            Arrays.fill(dirs, DirectoryId.MIGRATING);
            PartitionRegistration partition = new PartitionRegistration.Builder()
                .setReplicas(replicas).setDirectories(dirs).setIsr(array(f[2]))
                .setLeader(Integer.parseInt(f[3])).setLeaderEpoch(Integer.parseInt(f[4]))
                .setPartitionEpoch(Integer.parseInt(f[5]))
                .setLeaderRecoveryState(LeaderRecoveryState.of(Byte.parseByte(f[6])))
                .setRemovingReplicas(array(f[7])).setAddingReplicas(array(f[8]))
                .setElr(new int[0]).setLastKnownElr(new int[0]).build();
            Set<Integer> acceptable = Set.copyOf(list(f[9]));
            PartitionChangeBuilder builder = new PartitionChangeBuilder(partition, Uuid.ONE_UUID, 0,
                acceptable::contains, MetadataVersion.LATEST_PRODUCTION, 2, false);
            builder.setElection(PartitionChangeBuilder.Election.valueOf(f[10]));
            builder.setDefaultDirProvider(b -> new Uuid(0L, 100L + b));
            if (!f[11].equals("-")) builder.setTargetIsr(list(f[11]));
            if (!f[12].equals("-")) builder.setTargetReplicas(list(f[12]));
            if (!f[13].equals("-")) builder.setTargetRemoving(list(f[13]));
            if (!f[14].equals("-")) builder.setTargetAdding(list(f[14]));
            if (!f[15].equals("-")) builder.setTargetLeaderRecoveryState(LeaderRecoveryState.of(Byte.parseByte(f[15])));
            Optional<ApiMessageAndVersion> built = builder.build();
            if (built.isEmpty()) {
                System.out.println(f[0] + " none");
                continue;
            }
            PartitionChangeRecord r = (PartitionChangeRecord) built.get().message();
            String d = r.directories() == null ? "null"
                : "[" + r.directories().stream().map(PartitionChangeDiff::uuid).collect(Collectors.joining(",")) + "]";
            System.out.println(f[0] + " leader=" + r.leader() + " isr=" + ints(r.isr()) + " replicas=" + ints(r.replicas())
                + " removing=" + ints(r.removingReplicas()) + " adding=" + ints(r.addingReplicas())
                + " lrs=" + r.leaderRecoveryState() + " dirs=" + d + " elr=" + ints(r.eligibleLeaderReplicas())
                + " lkelr=" + ints(r.lastKnownElr()));
        }
    }
}
